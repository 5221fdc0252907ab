"""Which folders a user may import from and export to (DESIGN §4 "Boundaries", "Roots are per
user"): the default user `local` has BRAID_IMPORT_ROOTS (the home folder by default), any
other user the roots `braid user add NAME --roots A:B` gave it (none without). Braid's own
data dir (sessions, users, the token) is never inside anyone's roots, whatever they say."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from server.base.errors import BadRequest, Forbidden
from server.base.settings import variable_of
from server.store.users import DEFAULT_USER, off_loop

NAME_MAX = 255  # bytes of one name (Linux, macOS): longer is ENAMETOOLONG, not a 500
PATH_MAX = 4096

if TYPE_CHECKING:
    from server.agent.services import Services
    from server.base.settings import Settings


def _real(path: Path | str) -> Path:
    return Path(os.path.realpath(Path(path).expanduser()))


def _under(path: Path, top: Path) -> bool:
    return os.path.commonpath([str(top), str(path)]) == str(top)


@dataclass(frozen=True)
class Roots:
    paths: tuple[Path, ...]  # real paths
    data_dir: Path  # real path
    hint: str  # where the roots come from, for the error message

    @classmethod
    def of(cls, settings: Settings, user_id: str, given: list[str] | None) -> Roots:
        if user_id == DEFAULT_USER:
            paths, hint = list(settings.import_roots), variable_of("import_roots")
        else:
            paths = [Path(p) for p in given or []]
            hint = f"braid user add {user_id} --roots"
        return cls(tuple(_real(p) for p in paths), _real(settings.data_dir), hint)

    def in_data_dir(self, path: Path) -> bool:
        return _under(path, self.data_dir)

    def root_of(self, real: Path) -> Path | None:
        """The (innermost) root holding the real path `real`, if any."""
        found = [r for r in self.paths if _under(real, r)]
        return max(found, key=lambda r: len(str(r))) if found else None

    def covers(self, real: Path) -> bool:
        """A real path the user may read or write: in a root, not in the data dir."""
        return self.root_of(real) is not None and not self.in_data_dir(real)

    def allowed(self, raw: str, *, export: bool = False) -> Path:
        """The real path behind `raw` if the user may reach it, else `forbidden`. Checked
        before existence, so nothing outside the roots is revealed. An export may not go to
        a folder that holds the data dir (its files could land in it)."""
        given = Path(raw).expanduser()
        if not given.is_absolute():
            raise BadRequest(f"{raw} is not an absolute path")
        if len(os.fsencode(given)) >= PATH_MAX or \
                any(len(os.fsencode(part)) > NAME_MAX for part in given.parts):
            raise BadRequest(f"{raw[:80]}... is longer than a path or a name can be "
                             f"({NAME_MAX} bytes a name, {PATH_MAX} in all)")
        path = _real(given)
        if self.root_of(path) is None:  # first: says nothing of where the data dir is
            raise Forbidden(f"{raw} is outside the folders you may import from and export to "
                            f"({self.hint})")
        if self.in_data_dir(path) or (export and _under(self.data_dir, path)):
            raise Forbidden(f"{raw} is Braid's own data folder (or holds it): never imported "
                            "or exported")
        return path

    def data_dir_in(self, folder: Path) -> str | None:
        """The data dir's path relative to the real folder `folder`, when it lies inside."""
        if folder != self.data_dir and _under(self.data_dir, folder):
            return os.path.relpath(self.data_dir, folder)
        return None


async def roots_of(braid: Services, user_id: str) -> Roots:
    """The caller's roots (a short query off the event loop for a user other than local)."""
    given = None if user_id == DEFAULT_USER else await off_loop(braid.users).roots(user_id)
    return Roots.of(braid.settings, user_id, given)
