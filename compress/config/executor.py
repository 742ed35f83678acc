"""`executor:` of pipeline.yaml: where a search's trials compress their variants.

local (default): one after another in this process. ray: as Ray tasks on a cluster (or
a Ray instance started here), as many at once as its CPUs allow; the measurements stay
with this process, one at a time per device (compress.search.ray_trials).
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from compress.stagebase import Strict


class LocalExecutor(Strict):
    type: Literal["local"] = Field("local", description="trials one after another, here")


class RayExecutor(Strict):
    type: Literal["ray"] = Field("ray", description="trials' compression as Ray tasks")
    address: Optional[str] = Field(
        None, description="the cluster: `auto` (the one started on this machine with `ray "
        "start --head`), `ray://host:10001` (a remote head's client port), or unset: the "
        "cluster RAY_ADDRESS names, else a Ray instance started for this run")
    cpus_per_trial: PositiveFloat = Field(
        1, description="CPUs a trial's compression declares (Ray runs as many trials at "
        "once as the cluster's CPUs allow); torch in the task uses as many threads as it "
        "does where the search runs, so that the files are the serial search's")
    memory_mb: Optional[PositiveInt] = Field(
        None, description="memory a trial's compression declares (Ray keeps a node from "
        "taking more trials than it holds)")
    max_concurrent: Optional[PositiveInt] = Field(
        None, description="trials compressing at once, at most (default: the cluster's "
        "CPUs / cpus_per_trial)")
    num_cpus: Optional[PositiveInt] = Field(
        None, description="CPUs of the Ray instance started here when no cluster is given "
        "(default: all of this machine's)")

    @field_validator("address")
    @classmethod
    def _known_form(cls, value):
        if value is not None and value != "auto" and not value.startswith("ray://") \
                and ":" not in value:
            raise ValueError(f"address {value!r}: give auto, ray://host:port (a remote "
                             "cluster's client port, 10001 by default) or host:port (a head "
                             "node's GCS port, 6379 by default)")
        return value


EXECUTORS = (LocalExecutor, RayExecutor)
Executor = Annotated[Union[EXECUTORS], Field(discriminator="type")]
# the `type` tags, for messages; the search's executors register under the same names
EXECUTOR_TYPES = tuple(member.model_fields["type"].default for member in EXECUTORS)
