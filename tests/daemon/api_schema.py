"""The user API as the test clients see it.

schema/api.schema.json is generated from the one definition of the API's
messages (common/include/topo/common/user_api.hpp; a unit test keeps the
file equal to what the tables generate). Tests check the daemon's answers
against it (a job list, a job, a node list), and derive the hostile
submissions from it (schema_hostile.py): for every field of a valid POST
/v1/jobs body, the wrong types, the values just out of range, strings over
their limit or outside their character class, the missing field and an
unknown one, each with the field the daemon must name when it refuses.

Needs python3-jsonschema (Debian).
"""

import json
import os

import jsonschema

try:  # jsonschema 4.18 and later
    from referencing import Registry, Resource
except ImportError:  # Debian 12's 4.10
    Registry = Resource = None

from schema_hostile import field_variants

_SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "schema")


def _absolute_refs(schema, base=None):
    """A copy of schema whose local refs ("#/...") name its $id."""
    base = base or schema["$id"]
    if isinstance(schema, dict):
        return {k: (base + v if k == "$ref" and isinstance(v, str) and v.startswith("#")
                    else _absolute_refs(v, base)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_absolute_refs(v, base) for v in schema]
    return schema


class Api:
    def __init__(self, schema_dir=_SCHEMA_DIR):
        with open(os.path.join(schema_dir, "api.schema.json")) as f:
            self.schema = json.load(f)
        with open(os.path.join(schema_dir, "job.schema.json")) as f:
            job = json.load(f)
        self.defs = self.schema["$defs"]
        # The job spec is a reference to schema/job.schema.json by its $id.
        self.job = job
        self.registry = (Registry().with_resource(job["$id"], Resource.from_contents(job))
                         if Registry is not None else None)

    def check(self, name, value):
        """Raises when `value` does not follow the $defs entry `name` (e.g.
        "job_list" for GET /v1/jobs); returns it."""
        if self.registry is not None:
            validator = jsonschema.Draft202012Validator(self.defs[name], registry=self.registry)
        else:
            # Older jsonschema (Debian 12's 4.10) joins "#/$defs/..." inside
            # the job schema against the root, not the job's "urn:" $id (urn
            # is no relative scheme to urljoin): make those refs absolute.
            resolver = jsonschema.RefResolver("", self.defs[name],
                                              store={self.job["$id"]: _absolute_refs(self.job)})
            validator = jsonschema.Draft202012Validator(self.defs[name], resolver=resolver)
        validator.validate(value)
        return value

    def hostile(self, name, valid):
        """[(what, body, field)] for a valid object of the $defs entry
        `name`: each body must be refused naming `field`."""
        schema = self.defs[name]
        self.check(name, valid)
        out = []
        for prop in schema["properties"]:
            out += field_variants(valid, schema, [prop], prop)
        out.append(("unknown field", dict(valid, zz_unknown=1), "zz_unknown"))
        # Duplicate keys: the last one would silently win in most readers.
        key = next(iter(valid))
        text = json.dumps(valid)
        out.append(("duplicate key", text[:-1] + ", %s: %s}" % (json.dumps(key),
                                                              json.dumps(valid[key])), key))
        return out
