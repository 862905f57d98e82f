"""MkDocs hook: the reference pages, made from the code at build time (no file of them is
kept in the repository, so they cannot fall behind it).

- reference/cli.md: every command and subcommand of `deferq`, walked from click's command
  tree, each with its `--help` exactly as the terminal prints it;
- reference/python.md: the public names of `deferq` (its `__all__`), `deferq.testing` and
  `deferq.backoff`, as mkdocstrings directives (their docstrings and signatures);
- reference/http.md: every path and method of the HTTP API's OpenAPI document, with its
  summary, the token scope it needs, its parameters, request body and answers.

`tests/process/test_docs.py` calls the functions below directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import click
from mkdocs.structure.files import File, Files

HELP_WIDTH = 88  # the width the help is laid out at (a wide terminal's)


def commands(group: click.Command, path: str = "deferq") -> Iterator[tuple[str, click.Command]]:
    """Every command under `group`, depth first in the order `--help` lists them."""
    yield path, group
    if isinstance(group, click.Group):
        ctx = click.Context(group, info_name=path)
        for name in group.list_commands(ctx):
            sub = group.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from commands(sub, f"{path} {name}")


def help_text(path: str, command: click.Command) -> str:
    """The command's `--help` output, as `deferq ... --help` prints it."""
    parent = None
    for name in path.split()[:-1]:  # contexts of the groups above, for the usage line
        parent = click.Context(click.Group(name), info_name=name, parent=parent)
    ctx = click.Context(command, info_name=path.split()[-1], parent=parent,
                        terminal_width=HELP_WIDTH, max_content_width=HELP_WIDTH)
    return command.get_help(ctx)


def anchor(path: str) -> str:
    return path.replace(" ", "-")


def cli_page() -> str:
    from deferq.cli.main import main

    tree = list(commands(main))
    lines = [
        "# Command line reference",
        "",
        "Generated from the `deferq` command itself when the site is built: every command",
        "and subcommand with its `--help`. The guide to the commands is [Command line](../cli.md).",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    lines += [f"| [`{path}`](#{anchor(path)}) | {command.get_short_help_str(200)} |" for path, command in tree]
    for path, command in tree:
        lines += ["", f"## `{path}` {{#{anchor(path)}}}", "", "```text", help_text(path, command).rstrip(), "```"]
    return "\n".join(lines) + "\n"


# --- the Python API ---------------------------------------------------------------------

MODULES = ("deferq.testing", "deferq.backoff")  # public modules documented whole


def python_page() -> str:
    import deferq

    names = [name for name in deferq.__all__ if f"deferq.{name}" not in MODULES]
    lines = [
        "# Python API reference",
        "",
        "Generated from the docstrings and signatures of the code when the site is built:",
        "every name that `import deferq` exports, then `deferq.testing` and `deferq.backoff`.",
        "",
        "## deferq",
    ]
    for name in names:
        lines += ["", f"::: deferq.{name}", "    options:", "      heading_level: 3"]
    for module in MODULES:
        lines += ["", f"## {module}", "", f"::: {module}", "    options:", "      heading_level: 3",
                  "      show_root_heading: false", "      show_root_toc_entry: false"]
    return "\n".join(lines) + "\n"


# --- the HTTP API -----------------------------------------------------------------------

METHODS = ("get", "put", "post", "delete", "patch")
_SCOPE = re.compile(r"Needs a token with the (\w+) scope")


def cell(text: object) -> str:
    """Text fit for one table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def schema_text(schema: dict[str, Any]) -> str:
    """A short form of a JSON schema: a model's name, or its type and limits."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(schema_text(s) for s in schema["anyOf"])
    if "enum" in schema:
        return ", ".join(f"`{v}`" for v in schema["enum"])
    text = str(schema.get("type", "any"))
    if schema.get("type") == "array" and "items" in schema:
        text = f"array of {schema_text(schema['items'])}"
    limits = [f"{key} {schema[key]}" for key in ("minimum", "maximum", "minLength", "maxLength") if key in schema]
    if "pattern" in schema:
        limits.append(f"pattern `{schema['pattern']}`")
    if "default" in schema:
        limits.append(f"default `{schema['default']}`")
    return text + (f" ({', '.join(limits)})" if limits else "")


def scope_of(operation: dict[str, Any]) -> str:
    if "security" not in operation:
        return "none (no token)"
    found = _SCOPE.search(operation.get("description", ""))
    return f"`{found[1]}`" if found else "a token"


def operation_lines(method: str, path: str, op: dict[str, Any]) -> list[str]:
    lines = ["", f"### `{method.upper()} {path}`", "", cell(op.get("summary", "")), "",
             f"- **Scope:** {scope_of(op)}"]
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body:
        lines.append(f"- **Body:** {schema_text(body)}")
    answers = ", ".join(f"`{code}` {cell(answer['description'])}" for code, answer in op["responses"].items())
    lines.append(f"- **Answers:** {answers}")
    params = op.get("parameters", [])
    if params:
        lines += ["", "| parameter | in | required | value |", "|---|---|---|---|"]
        lines += [f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} "
                  f"| {cell(schema_text(p.get('schema', {})))} |" for p in params]
    return lines


def model_lines(name: str, schema: dict[str, Any]) -> list[str]:
    lines = ["", f"### {name} {{#{name.lower()}}}", ""]
    if schema.get("description"):
        lines += [cell(schema["description"]), ""]
    properties = schema.get("properties")
    if not properties:
        return lines + [f"{schema_text(schema)}"]
    required = set(schema.get("required", ()))
    lines += ["| field | required | value |", "|---|---|---|"]
    lines += [f"| `{field}` | {'yes' if field in required else 'no'} | {cell(schema_text(sub))} |"
              for field, sub in properties.items()]
    return lines


def http_page() -> str:
    from deferq.server.app import full_document

    document = full_document()
    lines = [
        "# HTTP API reference",
        "",
        "Generated from the OpenAPI document that `deferq serve` answers at `/openapi.json`,",
        f"when the site is built (OpenAPI {document['openapi']}). The guide is",
        "[The HTTP API](../http.md). Every path but `/healthz` and `/readyz` needs",
        "`Authorization: Bearer TOKEN` with a token of the scope named or a larger one",
        "(`reader` < `producer` < `admin`).",
        "",
        "## Operations",
    ]
    for path, operations in document["paths"].items():
        for method in METHODS:
            if method in operations:
                lines += operation_lines(method, path, operations[method])
    lines += ["", "## Models"]
    for name, schema in sorted(document["components"]["schemas"].items()):
        lines += model_lines(name, schema)
    return "\n".join(lines) + "\n"


PAGES = {"reference/cli.md": cli_page, "reference/python.md": python_page, "reference/http.md": http_page}


def on_files(files: Files, config: Any) -> Files:
    for uri, make in PAGES.items():
        files.append(File.generated(config, uri, content=make()))
    return files
