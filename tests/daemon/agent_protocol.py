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

import json
import os

import jsonschema

from schema_hostile import field_variants

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
            out += field_variants(valid, schema, [name], type_ + "." + name)
        out.append(("unknown field", dict(valid, zz_unknown=1), type_ + ".zz_unknown"))
        # Duplicate keys: the last one would silently win in most readers.
        text = json.dumps(valid)
        if len(valid) > 1:
            key = [k for k in valid if k != "type"][0]
            dup = text[:-1] + ", %s: %s}" % (json.dumps(key), json.dumps(valid[key]))
            out.append(("duplicate key", dup, key))
        return out
