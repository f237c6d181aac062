"""Background jobs in one package: the runner that claims and runs them across workers (:mod:`app.jobs.runner`),
what a running job sees of itself (:mod:`app.jobs.context`), what a tenant reads of its jobs
(:mod:`app.jobs.queries`), and the handlers of each kind — ``calibrate`` (:mod:`app.jobs.calibration`) and ``train``
(:mod:`app.jobs.training`), registered with the runner by ``app.gateway``."""

from app.jobs.context import JobAbandoned, JobCancelled, JobContext, JobHandler
from app.jobs.queries import JobQueries, JobSummary
from app.jobs.runner import ACTIVE_STATES, JobRunner, JobTiming

__all__ = ["ACTIVE_STATES", "JobAbandoned", "JobCancelled", "JobContext", "JobHandler", "JobQueries", "JobRunner",
           "JobSummary", "JobTiming"]
