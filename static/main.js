// The page's entry (base.html): each feature module registers on the core as it is imported
// (docs/DESIGN.md "The page's modules"), then the core starts them.
import {start} from "./core.js";
import "./conn.js";
import "./stream.js";
import "./composer.js";
import "./children.js";
import "./menus.js";
import "./files.js";
import "./copy.js";
import "./times.js";
import "./revert.js";
import "./rewind.js";
import "./search.js";
import "./dag.js";
import "./context.js";
import "./connections.js";

start();
