"""pyiceberg's row filters as SQL the engine runs.

A filter is a pyiceberg `BooleanExpression` (unbound: `EqualTo("id", 3)`, `And(...)`, ...) or its
string form (`"id > 3 and name is not null"`, parsed by pyiceberg's own parser). Column names
are quoted; a nested field `a.b` is read as `"a"['b']`.

Rows select as pyiceberg selects them: negations are pushed down to the predicates first (as
pyiceberg's `rewrite_not`), comparisons with NULL select nothing, and `NotIn` selects NULLs
(as in pyiceberg and Iceberg's Java evaluator: NULL is not in the set).
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any

from .errors import InvalidInput


def column(name: str) -> str:
    """A column name (dotted for a nested field) as a SQL expression."""
    head, *rest = name.split(".")
    out = quote(head)
    for part in rest:
        out += "['" + part.replace("'", "''") + "']"
    return out


def quote(identifier: str) -> str:
    """A SQL identifier, quoted."""
    return '"' + identifier.replace('"', '""') + '"'


def literal(value: Any) -> str:
    """A Python (or pyiceberg literal's) value as a SQL literal."""
    value = getattr(value, "value", value)
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return f"CAST('{value}' AS DOUBLE)"
        return repr(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        return f"TIMESTAMP '{value.isoformat()}'"
    if isinstance(value, datetime.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, datetime.time):
        return f"TIME '{value.isoformat()}'"
    if isinstance(value, uuid.UUID):
        return f"'{value}'"
    if isinstance(value, (bytes, bytearray)):
        return f"X'{bytes(value).hex()}'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise InvalidInput(f"row filter: unsupported literal {value!r}")


def _term(pred: Any) -> str:
    term = pred.term
    name = getattr(term, "name", None)
    if name is None:  # a bound reference
        name = term.field.name
    return column(name)


def to_sql(expr: Any) -> str:
    """The SQL of `expr`: a pyiceberg BooleanExpression or its string form."""
    if isinstance(expr, str):
        from pyiceberg.expressions.parser import parse

        try:
            expr = parse(expr)
        except Exception as e:  # pyparsing's errors: one line
            raise InvalidInput(f"row filter {expr!r}: {str(e).splitlines()[0]}") from None
    from pyiceberg.expressions.visitors import rewrite_not

    return _sql(rewrite_not(expr))


def _sql(expr: Any) -> str:
    kind = type(expr).__name__.removeprefix("Bound")
    if kind == "AlwaysTrue":
        return "TRUE"
    if kind == "AlwaysFalse":
        return "FALSE"
    if kind == "And":
        return f"({_sql(expr.left)} AND {_sql(expr.right)})"
    if kind == "Or":
        return f"({_sql(expr.left)} OR {_sql(expr.right)})"
    if kind == "Not":
        return f"(NOT {_sql(expr.child)})"
    binary = {
        "EqualTo": "=",
        "NotEqualTo": "<>",
        "LessThan": "<",
        "LessThanOrEqual": "<=",
        "GreaterThan": ">",
        "GreaterThanOrEqual": ">=",
    }
    if kind in binary:
        return f"({_term(expr)} {binary[kind]} {literal(expr.literal)})"
    if kind in ("In", "NotIn"):
        values = ", ".join(sorted(literal(v) for v in expr.literals))
        if kind == "In":
            return f"({_term(expr)} IN ({values}))"
        return f"({_term(expr)} NOT IN ({values}) OR {_term(expr)} IS NULL)"
    if kind == "IsNull":
        return f"({_term(expr)} IS NULL)"
    if kind == "NotNull":
        return f"({_term(expr)} IS NOT NULL)"
    if kind == "IsNaN":
        return f"isnan({_term(expr)})"
    if kind == "NotNaN":
        return f"(NOT isnan({_term(expr)}))"
    if kind in ("StartsWith", "NotStartsWith"):
        test = f"starts_with({_term(expr)}, {literal(expr.literal)})"
        return test if kind == "StartsWith" else f"(NOT {test})"
    raise InvalidInput(f"row filter: unsupported expression {expr!r}")
