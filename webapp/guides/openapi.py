"""The OpenAPI document of the JSON API (django-ninja builds it from the endpoints) as rows a page
can show: one operation per method and path, with its parameters, body fields and responses."""

from __future__ import annotations

from typing import Any


def _type(schema: dict[str, Any]) -> str:
    """A schema's type in a few characters: ``string``, ``integer ≤ 100``, ``JobOut``, ``string | null``."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " | ".join(_type(s) for s in schema["anyOf"])
    if schema.get("enum"):
        return " | ".join(f"'{v}'" for v in schema["enum"])
    kind = schema.get("type", "object")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    bounds = [
        f"≥ {schema['minimum']}" if "minimum" in schema else "",
        f"≤ {schema['maximum']}" if "maximum" in schema else "",
    ]
    return " ".join([kind, *filter(None, bounds)])


def _fields(schema: dict[str, Any]) -> list[dict[str, str]]:
    required = set(schema.get("required", []))
    return [
        {
            "name": name,
            "type": _type(prop),
            "required": "yes" if name in required else "",
            "description": prop.get("description", ""),
        }
        for name, prop in schema.get("properties", {}).items()
    ]


def operations(schema: dict[str, Any]) -> list[dict[str, Any]]:
    ops = []
    for path, methods in schema.get("paths", {}).items():
        for method, op in methods.items():
            params = [
                {
                    "name": p["name"],
                    "in": p["in"],
                    "type": _type(p.get("schema", {})),
                    "required": "yes" if p.get("required") else "",
                    "description": p.get("description", ""),
                }
                for p in op.get("parameters", [])
            ]
            body = []
            for media_type, content in op.get("requestBody", {}).get("content", {}).items():
                body.append({"media_type": media_type, "fields": _fields(content.get("schema", {}))})
            responses = []
            for status, response in op.get("responses", {}).items():
                content = response.get("content", {}).get("application/json", {}).get("schema", {})
                responses.append(
                    {
                        "status": status,
                        "description": response.get("description", ""),
                        "type": _type(content) if content else "",
                    }
                )
            ops.append(
                {
                    "id": op.get("operationId", f"{method}-{path}"),
                    "method": method.upper(),
                    "path": path,
                    "summary": op.get("summary", ""),
                    "description": op.get("description", ""),
                    "params": params,
                    "body": body,
                    "responses": responses,
                }
            )
    return ops


def schemas(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": name, "fields": _fields(body)}
        for name, body in schema.get("components", {}).get("schemas", {}).items()
    ]
