"""`compress schema` describes every field: the JSON Schema is the reference a user reads
(and an editor shows) while writing pipeline.yaml."""
import json

from compress.config.pipeline import Pipeline
from tests.conftest import run_cli


def test_every_field_of_the_schema_has_a_description():
    schema = Pipeline.model_json_schema()
    definitions = [("Pipeline", schema), *schema["$defs"].items()]
    missing = [f"{name}.{field}" for name, definition in definitions
               for field, spec in (definition.get("properties") or {}).items()
               if not spec.get("description")]
    assert not missing, f"fields without a description: {missing}"


def test_python_objects_stay_out_of_the_schema():
    done = run_cli("schema")
    assert done.returncode == 0
    schema = json.loads(done.stdout)
    source = schema["$defs"]["TorchSource"]["properties"]
    assert "module" not in source and source["factory"]["anyOf"][0]["type"] == "string"
    assert "value" not in schema["$defs"]["DataSource"]["properties"]
