"""Job kinds and the contract they follow (``docs/architecture.md``, "The job-kind contract")."""

from mlcore.jobs.context import InMemoryContext, JobContext
from mlcore.jobs.params import (
    Bool,
    Choice,
    Dataset,
    Estimate,
    File,
    Float,
    Int,
    Key,
    Model,
    Multi,
    Numbers,
    Param,
    ParamError,
    Seed,
    Text,
)
from mlcore.jobs.spec import Comparison, JobCancelled, JobError, JobSpec, Metric, ValidationError

__all__ = [
    "Bool",
    "Choice",
    "Comparison",
    "Dataset",
    "Estimate",
    "File",
    "Float",
    "InMemoryContext",
    "Int",
    "JobCancelled",
    "JobContext",
    "JobError",
    "JobSpec",
    "Key",
    "Metric",
    "Model",
    "Multi",
    "Numbers",
    "Param",
    "ParamError",
    "Seed",
    "Text",
    "ValidationError",
]
