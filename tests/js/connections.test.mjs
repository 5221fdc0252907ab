// The Connections dialog's one pure part (static/connections.js): an MCP server's headers as
// the user types them, one "Name: value" a line, into the object the API takes.
import assert from "node:assert/strict";
import {test} from "node:test";

import {parseHeaders} from "../../static/connections.js";

test("headers are one Name: value a line, blank lines skipped, values keep their colons", function () {
  assert.deepEqual(parseHeaders(""), {});
  assert.deepEqual(parseHeaders("Authorization: Bearer a:b\n\n X-Key :  k1 \n"),
    {"Authorization": "Bearer a:b", "X-Key": "k1"});
});

test("a line without a name and a colon is refused with what to write", function () {
  assert.throws(function () { parseHeaders("just-a-token"); }, /Name: value/);
  assert.throws(function () { parseHeaders(": no name"); }, /Name: value/);
});
