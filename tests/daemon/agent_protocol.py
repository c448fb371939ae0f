"""The agent protocol as the test clients see it.

schema/agent-protocol.schema.json is generated from the one definition of
the protocol (common/include/topo/common/agent_protocol.hpp; a unit test keeps
the file equal to what the tables generate). Test agents build their
well-formed messages here, checked against that schema before they are sent,
and the hostile table is generated from it: for every field of a valid
message, the wrong types, the values just out of range, strings over their
limit or outside their character class, the missing field and an unknown
one, each with the field the daemon must name when it refuses.

Needs python3-jsonschema (Debian).
"""

import copy
import json
import os

import jsonschema

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "schema",
                           "agent-protocol.schema.json")


class Protocol:
    def __init__(self, path=SCHEMA_PATH):
        with open(path) as f:
            self.schema = json.load(f)
        defs = self.schema["$defs"]
        self.up = {m["properties"]["type"]["const"]: m for m in defs["agent_to_scheduler"]["oneOf"]}
        self.down = {m["properties"]["type"]["const"]: m
                     for m in defs["scheduler_to_agent"]["oneOf"]}
        self.version = self.schema["x-protocolVersion"]

    def agent(self, type_, **fields):
        """An agent -> scheduler message, checked against the schema."""
        message = {"type": type_}
        message.update(fields)
        jsonschema.validate(message, self.up[type_])
        return message

    def check_scheduler(self, message):
        """Raises when a scheduler -> agent message does not follow the schema."""
        if message is None:
            raise AssertionError("no message (the connection closed)")
        schema = self.down.get(message.get("type"))
        if schema is None:
            raise AssertionError("unknown scheduler message type: %r" % (message,))
        jsonschema.validate(message, schema)
        return message

    def hostile(self, valid):
        """[(what, message, field)] for a valid agent message: each message
        must be refused naming `field`."""
        type_ = valid["type"]
        schema = self.up[type_]
        out = []
        for name in schema["properties"]:
            if name == "type":
                continue
            out += _field_variants(valid, schema, [name], type_ + "." + name)
        out.append(("unknown field", dict(valid, zz_unknown=1), type_ + ".zz_unknown"))
        # Duplicate keys: the last one would silently win in most readers.
        text = json.dumps(valid)
        if len(valid) > 1:
            key = [k for k in valid if k != "type"][0]
            dup = text[:-1] + ", %s: %s}" % (json.dumps(key), json.dumps(valid[key]))
            out.append(("duplicate key", dup, key))
        return out


def _get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def _set(obj, path, value):
    obj = copy.deepcopy(obj)
    target = obj
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    return obj


def _delete(obj, path):
    obj = copy.deepcopy(obj)
    target = obj
    for p in path[:-1]:
        target = target[p]
    del target[path[-1]]
    return obj


WRONG_TYPES = {
    "integer": ["1", 1.5, True, None, [1]],
    "string": [5, None, ["x"], {"x": 1}],
    "boolean": [1, "true", None],
    "array": [{}, "x", 1],
    "object": [[], "x", 1],
}

PATTERN_BREAKERS = {
    "^[!-~]*$": "has space",
    "^[^\\u0000-\\u001f\\u007f]*$": "two\nlines",
    "^(/.*)?$": "relative/path",
    "^[A-Za-z0-9_][A-Za-z0-9._-]*$": "-rf",
    "^[A-Za-z_][A-Za-z0-9_]*$": "1BAD",
    "^[A-Za-z0-9][A-Za-z0-9._-]*$": "n\x1b[2J",
    "^[A-Za-z0-9+/]*={0,2}$": "not base64!",
}


def _field_variants(valid, parent_schema, path, field):
    schema = parent_schema["properties"][path[-1]]
    required = path[-1] in parent_schema.get("required", [])
    out = []
    present = True
    try:
        value = _get(valid, path)
    except (KeyError, IndexError):
        present = False
    if required and present:
        out.append(("missing " + field, _delete(valid, path), field))
    if "enum" in schema:
        out.append((field + " not in the enum", _set(valid, path, "bogus-value"), field))
        out.append((field + " a number", _set(valid, path, 7), field))
        return out
    kind = schema.get("type")
    for wrong in WRONG_TYPES.get(kind, []):
        out.append(("%s = %r" % (field, wrong), _set(valid, path, wrong), field))
    if kind == "integer":
        lo, hi = schema["minimum"], schema["maximum"]
        out.append(("%s below %d" % (field, lo), _set(valid, path, lo - 1), field))
        if hi < 2 ** 63 - 1:
            out.append(("%s above %d" % (field, hi), _set(valid, path, hi + 1), field))
    elif kind == "string":
        limit = schema.get("x-maxBytes", schema.get("maxLength"))
        if limit is not None and limit < (1 << 20):
            out.append(("%s over %d bytes" % (field, limit), _set(valid, path, "x" * (limit + 1)),
                        field))
        if schema.get("minLength", 0) >= 1:
            out.append((field + " empty", _set(valid, path, ""), field))
        breaker = PATTERN_BREAKERS.get(schema.get("pattern"))
        if breaker is not None:
            out.append(("%s = %r" % (field, breaker), _set(valid, path, breaker), field))
    elif kind == "array" and present and value:
        items = schema["items"]
        if "maxItems" in schema and schema["maxItems"] < 10000:
            out.append(("%s too long" % field,
                        _set(valid, path, [value[0]] * (schema["maxItems"] + 1)), field))
        if items.get("type") == "object":
            for name in items["properties"]:
                out += _field_variants(valid, items, path + [0, name],
                                       "%s[0].%s" % (field, name))
        else:
            for wrong in WRONG_TYPES.get(items.get("type"), [])[:2]:
                out.append(("%s[0] = %r" % (field, wrong), _set(valid, path + [0], wrong),
                            field + "[0]"))
    return out
