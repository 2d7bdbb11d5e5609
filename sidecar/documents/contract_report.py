"""The report document's declarations (`dsh-sidecar report --json`): GPU-hours held, busy and held
but idle per user, job or GPU model over a window, from the run ledger or a fleet's Prometheus
(sidecar/verdict/accounting.py sums them; sidecar/documents/report.py builds the document). Kept
apart from contract.py only for its length; contract.py lists it among DOCUMENTS, so the schema,
docs/api.md and the JSDoc typedefs carry it."""

from __future__ import annotations

from sidecar.common.usage import GROUPINGS
from sidecar.documents.contract_types import INT, NUM, STR, Enum, F, ListOf, Obj

SOURCES = ("ledger", "prometheus")
MAX_ROW_NAMES = 32  # verdict/accounting.py MAX_NAMES: a test keeps the two equal

REPORT_ROW = Obj(
    "ReportRow",
    "One user, job or GPU model over the window (or `total`, all of them). GPU-hours are GPU-seconds / "
    "3600, summed over GPUs: two GPUs held for an hour are 2.",
    {
        "key": F(
            STR,
            "the user (its uid as `uid N` when the name is unknown), the job (the ledger's run key; "
            "`<node>/<job_id>` from Prometheus), or the GPU (its model from the ledger; `<node>/<index>` "
            "from Prometheus); `unknown` where the source could not name it",
        ),
        "runs": F(INT, "the runs (jobs) with time inside the window"),
        "gpu_held_h": F(NUM, "GPU-hours with memory allocated by the job's processes"),
        "gpu_busy_h": F(NUM, "of those, GPU-hours with the GPU's utilisation at or above the idle threshold"),
        "gpu_idle_held_h": F(NUM, "held - busy: GPU-hours held with no work (the report's order, most first)"),
        "energy_kwh": F(NUM, "the energy of the held GPUs, where known; null: never known", null=True),
        "energy_known_fraction": F(
            NUM, "the share of `gpu_held_h` whose energy is known (`energy_kwh` covers it)", null=True
        ),
        "users": F(ListOf(STR, MAX_ROW_NAMES), "the users, sorted (at most 32)"),
        "slurm_jobs": F(ListOf(STR, MAX_ROW_NAMES), "the Slurm job ids where known, sorted (at most 32)"),
        "slurm_job_count": F(INT, "the Slurm jobs in all"),
        "pods": F(ListOf(STR, MAX_ROW_NAMES), "the Kubernetes pods (`namespace/name`) where known (at most 32)"),
        "pod_count": F(INT, "the pods in all"),
        "hosts": F(ListOf(STR, MAX_ROW_NAMES), "the hosts (nodes) it ran on (at most 32)"),
        "gpu_models": F(ListOf(STR, MAX_ROW_NAMES), "the GPU models it held (at most 32)"),
        "job_id": F(STR, "by job: the job's id (`<pid>-<start ticks>`); else null", null=True),
        "command": F(ListOf(STR), "by job: the job's command line (clipped); else empty"),
    },
)


def report_declaration(schema: int) -> Obj:
    """The ReportDocument, with the schema number contract.py gives it."""
    return Obj(
        "ReportDocument",
        "`dsh-sidecar report --json`: GPU-hours accounted over [since, until). A minute partly inside the "
        "window counts in proportion to the part inside.",
        {
            "schema": F(Enum((schema,)), "the document's schema; a client that reads another says so"),
            "time_unix_s": F(NUM, "when the report was made"),
            "source": F(Enum(SOURCES), "`ledger` (this machine's run ledger) or `prometheus` (a fleet)"),
            "location": F(STR, "the ledger file or the Prometheus address"),
            "since_unix_s": F(NUM, "the window's start (included)"),
            "until_unix_s": F(NUM, "the window's end (excluded)"),
            "by": F(Enum(GROUPINGS), "what a row is: a user, a job, or a GPU"),
            "rows": F(ListOf(REPORT_ROW), "the most GPU-hours held idle first"),
            "total": F(REPORT_ROW, "all rows together (its `key` is `total`)"),
        },
    )
