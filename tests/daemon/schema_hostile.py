"""Hostile variants of a valid JSON object, derived from its JSON Schema.

The schemas of schema/ are generated from the one C++ definition of each
message (common/src/agent_protocol.cpp, common/src/user_api*.cpp): for every
field of a valid object, the wrong types, the values just out of range,
strings over their limit or outside their character class, the missing field
(when required), each with the field path the reader must name when it
refuses. The agent protocol's hostile table (agent_protocol.py) and the user
API's (api_schema.py) are made here.
"""

import copy


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
    "number": ["1", True, None, [1]],
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
    "^[a-z0-9][a-z0-9_.-]*(/[a-z0-9][a-z0-9_.-]*){0,7}$": "../etc",
    "^[A-Za-z0-9._:-]*$": "a b",
    "^[A-Za-z0-9][A-Za-z0-9._-]*$": "n\x1b[2J",
    "^[A-Za-z0-9+/]*={0,2}$": "not base64!",
}


def field_variants(valid, parent_schema, path, field):
    """[(what, object, field)] for the property path[-1] of parent_schema."""
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
    if "anyOf" in schema:  # a nullable value: null is fine, the rest is the value's
        schema = schema["anyOf"][0]
    if "enum" in schema:
        out.append((field + " not in the enum", _set(valid, path, "bogus-value"), field))
        out.append((field + " a number", _set(valid, path, 7), field))
        return out
    kind = schema.get("type")
    for wrong in WRONG_TYPES.get(kind, []):
        out.append(("%s = %r" % (field, wrong), _set(valid, path, wrong), field))
    if kind in ("integer", "number"):
        lo, hi = schema["minimum"], schema["maximum"]
        step = 1 if kind == "integer" else max(abs(lo), abs(hi), 1) * 1e-3
        out.append(("%s below %s" % (field, lo), _set(valid, path, lo - step), field))
        if hi < 2 ** 63 - 1:
            out.append(("%s above %s" % (field, hi), _set(valid, path, hi + step), field))
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
                out += field_variants(valid, items, path + [0, name], "%s[0].%s" % (field, name))
        else:
            for wrong in WRONG_TYPES.get(items.get("type"), [])[:2]:
                out.append(("%s[0] = %r" % (field, wrong), _set(valid, path + [0], wrong),
                            field + "[0]"))
    return out
