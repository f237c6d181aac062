"""Domain errors → HTTP responses, in one place.

* ``InputError`` (bad Q-matrix, unknown item ids, unknown entity…) → 422 (or 404 for an
  unknown resource id), with FastAPI's ``detail`` shape: a list of ``{loc, msg, type}``
  whose ``loc`` names the field.
* ``AllEntitiesFailed`` → 503 with each entity's reason.
* ``BudgetExceeded`` → 429 saying the student's privacy budget is spent.
* ``QMatrixError`` raised below the services → 422.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from calibration import AllEntitiesFailed
from privacy import BudgetExceeded
from qmatrix import QMatrixError

__all__ = ["InputError", "install_error_handlers"]


class InputError(Exception):
    def __init__(
        self,
        loc: Sequence[str | int],
        messages: Sequence[str],
        *,
        status_code: int = 422,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.loc, self.messages, self.status_code, self.extra = list(loc), list(messages), status_code, extra or {}
        super().__init__("; ".join(messages))

    def detail(self) -> list[dict[str, Any]]:
        return [{"loc": self.loc, "msg": m, "type": "value_error", **self.extra} for m in self.messages]


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(InputError)
    async def _input_error(_: Request, exc: InputError) -> JSONResponse:
        return JSONResponse(status_code=exc.status_code, content={"detail": exc.detail()})

    @app.exception_handler(QMatrixError)
    async def _qmatrix_error(_: Request, exc: QMatrixError) -> JSONResponse:
        detail = [{"loc": ["body"], "msg": p, "type": "value_error"} for p in exc.problems]
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.exception_handler(BudgetExceeded)
    async def _budget_spent(_: Request, exc: BudgetExceeded) -> JSONResponse:
        return JSONResponse(status_code=429, content={"detail": str(exc)})

    @app.exception_handler(AllEntitiesFailed)
    async def _all_failed(_: Request, exc: AllEntitiesFailed) -> JSONResponse:
        return JSONResponse(
            status_code=503,
            content={
                "detail": "no entity answered (each failed or was skipped); no diagnosis was made",
                "entities": [{"name": o.name, "status": o.status, "error": o.error} for o in exc.outcomes],
            },
        )
