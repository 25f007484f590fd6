"""Log records: the request id on each (RequestIdFilter), APP_LOG_FORMAT text or json (one object per line),
the per-request access line (app.edge.gate.Gate, APP_ACCESS_LOG), and the logging config of `python -m app`
(uvicorn's loggers go through the same handler and format)."""

from __future__ import annotations

import json
import logging
import logging.config
from datetime import UTC, datetime
from typing import Any, Literal

from app.core.request_id import RequestInfo, current_id

ACCESS = logging.getLogger("app.access")
ACCESS_FIELDS = ("route", "method", "status", "latency_ms", "model", "batch_size")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"
LogFormat = Literal["text", "json"]


class RequestIdFilter(logging.Filter):
    """Sets record.request_id: the id of the request (or batch) being served when it was logged, else None."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current_id()
        return True


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT; "-" for the request id of a record logged outside any request."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        record.request_id = request_id or "-"
        try:
            return super().format(record)
        finally:
            record.request_id = request_id


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (ISO 8601, UTC, ms), level, logger, message, request_id, the access
    line's fields when present, and the formatted exception."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        for name in ACCESS_FIELDS:
            if (value := getattr(record, name, None)) is not None:
                out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str)


def log_access(info: RequestInfo, route: str, method: str, status: int, seconds: float) -> None:
    """The access line of one answered request (logger app.access, INFO)."""
    latency_ms = round(seconds * 1000, 3)
    fields: dict[str, Any] = {"route": route, "method": method, "status": status, "latency_ms": latency_ms}
    ran = ""
    if info.models:
        fields |= {"model": ",".join(info.models), "batch_size": info.batch_size}
        ran = f" model={fields['model']} batch_size={info.batch_size}"
    ACCESS.info("%s %s %d %.1f ms%s", method, route, status, latency_ms, ran, extra=fields)


def logging_config(log_format: LogFormat, level: str) -> dict[str, Any]:
    """A logging.config.dictConfig dict: one stderr handler with the request-id filter in `log_format`, on
    the root logger; uvicorn's loggers propagate to it (its own access log stays off: the gate writes one)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {"text": {"()": TextFormatter}, "json": {"()": JsonFormatter}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": log_format,
                "filters": ["request_id"],
            }
        },
        "loggers": {
            name: {"handlers": [], "propagate": True}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
        },
        "root": {"level": level.upper(), "handlers": ["stderr"]},
    }


def configure_logging(log_format: LogFormat, level: str) -> None:
    """python -m app's logging; warnings become records too (a raw line would break json)."""
    logging.config.dictConfig(logging_config(log_format, level))
    logging.captureWarnings(True)
