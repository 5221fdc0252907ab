"""The total an import, an update from source or an upload may bring in (DESIGN §4
"Boundaries", Sizes): BRAID_IMPORT_MAX_BYTES and BRAID_IMPORT_MAX_FILES, counted as files
arrive, before each is read; past either, `TooLarge` (HTTP 413) and nothing is kept."""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.base.errors import TooLarge

if TYPE_CHECKING:
    from server.base.settings import Settings


class Budget:
    """The total an import or an update may bring in (BRAID_IMPORT_MAX_BYTES, _FILES),
    counted as files arrive and before each is read (a folder's by its size on disk, a
    repository's by its object header, before inflating): a tree bomb (a small repository
    whose trees repeat one subtree many times over) stops at the limit, in time and bytes
    proportional to the limit, not to the bomb. Folders walked count against the files
    limit too, so a bomb of nested trees without files stops as well."""

    def __init__(self, max_bytes: int | None = None, max_files: int | None = None,
                 what: str = "the source") -> None:
        self.what = what  # how errors name what is counted ("the upload")
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.bytes = 0
        self.files = 0
        self.folders = 0

    @classmethod
    def of(cls, settings: Settings, what: str = "the source") -> Budget:
        return cls(settings.import_max_bytes, settings.import_max_files, what)

    def take(self, size: int) -> None:
        """One more file of `size` bytes, or TooLarge (nothing of it read yet)."""
        self.files += 1
        self.bytes += size
        if self.max_files is not None and self.files > self.max_files:
            raise TooLarge(f"{self.what} has more than {self.max_files:,} files "
                           "(BRAID_IMPORT_MAX_FILES); nothing was kept")
        if self.max_bytes is not None and self.bytes > self.max_bytes:
            raise TooLarge(f"{self.what}'s files add up to more than {self.max_bytes:,} bytes "
                           "(BRAID_IMPORT_MAX_BYTES); nothing was kept")

    def folder(self) -> None:
        self.folders += 1
        if self.max_files is not None and self.folders > self.max_files:
            raise TooLarge(f"{self.what} has more than {self.max_files:,} folders "
                           "(BRAID_IMPORT_MAX_FILES); nothing was kept")
