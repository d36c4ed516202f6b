"""The OpenAPI description of request bodies the gateway reads as raw JSON.

Bodies are parsed by ``memoryd.validation`` (so a bad field gets memoryd's own message,
as from the Python client), not by FastAPI; the pydantic types still are the schema,
published here under ``components.schemas``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

_REF = "#/components/schemas/{model}"


def request_body(*models: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` of a route whose JSON body is one of ``models``."""
    refs = [{"$ref": _REF.format(model=m.__name__)} for m in models]
    schema = refs[0] if len(refs) == 1 else {"oneOf": refs}
    return {"requestBody": {"required": True,
                            "content": {"application/json": {"schema": schema}}}}


def install(app: FastAPI, models: list[type[BaseModel]]) -> None:
    """Generate ``app``'s OpenAPI document with ``models`` among its schemas."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version,
                                   description=app.description, routes=app.routes)
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                schema = model.model_json_schema(ref_template=_REF)
                schemas.update(schema.pop("$defs", {}))
                schemas.setdefault(model.__name__, schema)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
