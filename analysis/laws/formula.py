"""A user's law written as a formula: parsed safely, its names bound to columns and parameters,
each parameter's role inferred, compiled to NumPy and JAX, and registered as a law.

`scalelab fit RUNS --formula "E + A / N**alpha + B / D**beta" --input N=params --input D=tokens`
fits the formula on the same engine as the built-in laws (multi-start batched L-BFGS, bootstrap CIs,
forward-chaining prediction intervals; analysis/laws/groups.py runs the fit).

**Syntax.** Python arithmetic (`+ - * / **`, `^` is read as `**`), numbers, names and the functions
`exp log log2 log10 sqrt abs tanh minimum maximum where` (comparisons `< <= > >= == !=`, `and`, `or`
inside `where`'s condition). Helper definitions come first, separated by `;`:
`"Dp = U + RD * U * (1 - exp(-(D / U - 1) / RD)); E + A / N**alpha + B / Dp**beta"`. The text is
parsed by Python's `ast` module and walked over a whitelist of node types; nothing is `eval`ed.

**Names.** In this order: a helper defined in the formula; an `--input ALIAS=COLUMN` (or
`--input COLUMN`); a name given `--param NAME=...` is a parameter even if a column has that name;
any other name that is a column of the table is an input; every other name is a parameter. A
formula that uses no input is refused; a free name standing where an input belongs (the base of a
power with a fitted exponent, `Q**alpha`, or the argument of `log`, `sqrt`) that is not a column is
named in the error ("Q is neither a column nor an --input").

**Roles** (`infer_roles`), which set each parameter's default bounds and starts:
- exponent: the exponent of a power of an input (`N**alpha`); in (0, 3) when the sign is written
  (`N**-alpha`, `A / N**alpha`), else (-3, 3); starts spread over the interval;
- positive: a scale multiplying or dividing a power or exponential of an input (`A / N**alpha`), an
  inner shift added to one (`n**alpha + B`), anything inside a log, a square root or the base of a
  power (`(N / N0)**-alpha`), a time constant dividing inside an exponential (`exp(-t / tau)`):
  in (0, inf), log-spaced starts around the magnitude of what it multiplies or is added to;
- offset: a term of the top-level sum (`E + ...`): free, started near the target's minimum;
- rate / coefficient: a free-sign factor inside an exponential or of another term (`c * log(N)`).
Parameters the formula is affine in (amplitudes, offsets, log-linear coefficients) get no grid:
every start solves them by (bounded) linear least squares given the others (variable projection,
`starts`), so the grid only spans the exponents and other nonlinear parameters.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import itertools
import math
import operator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Mapping, Sequence

import numpy as np

from models.base.errors import AnalysisError

# ---- syntax -------------------------------------------------------------------------------------
FUNCTIONS: dict[str, int] = {
    "exp": 1,
    "log": 1,
    "log2": 1,
    "log10": 1,
    "sqrt": 1,
    "abs": 1,
    "tanh": 1,
    "minimum": 2,
    "maximum": 2,
    "where": 3,
}
ALIASES = {"ln": "log", "min": "minimum", "max": "maximum", "fmin": "minimum", "fmax": "maximum"}
_LOGS = ("log", "log2", "log10", "sqrt")  # functions of a positive argument
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_CMPOPS = {
    ast.Lt: "less",
    ast.LtE: "less_equal",
    ast.Gt: "greater",
    ast.GtE: "greater_equal",
    ast.Eq: "equal",
    ast.NotEq: "not_equal",
}
_OP_TEXT = {
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.MatMult: "@",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitOr: "|",
    ast.BitAnd: "&",
    ast.BitXor: "^",
}
SEARCH = "search"  # `--formula search`: analysis/laws/formula_search.py


@dataclass(frozen=True)
class Formula:
    """A parsed formula: helper definitions (name, expression) in order, the law's expression, and
    the free names (neither helpers nor functions) in order of first appearance."""

    text: str
    helpers: tuple[tuple[str, ast.expr], ...]
    body: ast.expr
    names: tuple[str, ...]

    @property
    def inlined(self) -> ast.expr:
        """The body with every helper replaced by its (inlined) expression: what roles read."""
        done: dict[str, ast.expr] = {}
        for name, expr in self.helpers:
            done[name] = _substitute(expr, done)
        return _substitute(self.body, done)


def _bad(text: str, why: str) -> AnalysisError:
    return AnalysisError(f"formula {text!r}: {why}")


def parse(text: str) -> Formula:
    """Parse a formula (see the module docstring); one-line errors for anything not allowed."""
    src = " ".join(str(text).split())
    if not src:
        raise AnalysisError("--formula is empty; write the law, e.g. --formula 'E + A / N**alpha'")
    py = src.replace("^", "**")
    try:
        tree = ast.parse(py, mode="exec")
    except SyntaxError as e:
        at = max(0, min(len(py), (e.offset or 1) - 1))
        where = (
            f"at the end (after {py[-12:]!r})" if at >= len(py.rstrip()) - 1 else f"at {py[at : at + 12]!r}"
        )
        raise _bad(src, f"syntax error {where}: {e.msg}; write Python arithmetic, e.g. E + A / N**alpha")
    except (ValueError, RecursionError) as e:
        raise _bad(src, f"cannot be parsed ({type(e).__name__})") from None
    if not tree.body:
        raise AnalysisError("--formula is empty; write the law, e.g. --formula 'E + A / N**alpha'")
    helpers: list[tuple[str, ast.expr]] = []
    *defs, last = tree.body
    for stmt in defs:
        if not (
            isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
        ):
            raise _bad(src, "only 'NAME = expression' definitions may come before the law, separated by ';'")
        name = stmt.targets[0].id
        if name in FUNCTIONS or name in ALIASES:
            raise _bad(src, f"{name} is a function; give the helper another name")
        if any(name == h for h, _ in helpers):
            raise _bad(src, f"{name} is defined twice")
        helpers.append((name, _check(stmt.value, src)))
    if not isinstance(last, ast.Expr):
        raise _bad(src, "the last part (after the last ';') must be the law's expression, not a definition")
    body = _check(last.value, src)
    names: list[str] = []
    defined: set[str] = set()
    helper_names = {h for h, _ in helpers}
    for name, expr in [*helpers, (None, body)]:
        for n in _names(expr):
            if n in helper_names and n not in defined:
                raise _bad(src, f"{n} is used before its definition; define helpers in order")
            if n not in defined and n not in names:
                names.append(n)
        if name is not None:
            defined.add(name)
    return Formula(src, tuple(helpers), body, tuple(names))


def split_formulas(text: str) -> list[str]:
    """The formulas of a formula file's text (`--formula @file.txt`): one per non-empty line, '#'
    comments dropped."""
    out = []
    for line in str(text).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def _check(node: ast.expr, src: str, condition: bool = False) -> ast.expr:
    """`node` if every node under it is allowed (a condition: comparisons too), else one error."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise _bad(src, f"{node.value!r} is not a number")
    elif isinstance(node, ast.Name):
        if node.id in FUNCTIONS or node.id in ALIASES:
            raise _bad(src, f"{node.id} is a function: call it, {node.id}(...)")
    elif isinstance(node, ast.BinOp):
        if not isinstance(node.op, (*_BINOPS, ast.Pow)):
            op = _OP_TEXT.get(type(node.op), type(node.op).__name__)
            raise _bad(src, f"the operator {op} is not allowed; use + - * / ** and the functions")
        _check(node.left, src)
        _check(node.right, src)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise _bad(src, f"the operator {type(node.op).__name__} is not allowed")
        _check(node.operand, src)
    elif isinstance(node, ast.Call):
        func = node.func.id if isinstance(node.func, ast.Name) else None
        if func is None:
            text = ast.unparse(node.func) if hasattr(ast, "unparse") else "?"
            raise _bad(src, f"unknown function {text}(); the functions are {', '.join(FUNCTIONS)}")
        func = ALIASES.get(func, func)
        if func not in FUNCTIONS:
            raise _bad(src, f"unknown function {node.func.id}(); the functions are {', '.join(FUNCTIONS)}")
        node.func.id = func
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise _bad(src, f"{func}() takes positional arguments only")
        if len(node.args) != FUNCTIONS[func]:
            n = FUNCTIONS[func]
            raise _bad(src, f"{func}() takes {n} argument{'s' if n > 1 else ''}, got {len(node.args)}")
        for i, a in enumerate(node.args):
            _check(a, src, condition=func == "where" and i == 0)
    elif isinstance(node, ast.Compare) and condition:
        if not all(type(op) in _CMPOPS for op in node.ops):
            raise _bad(src, "comparisons are < <= > >= == != only")
        for a in (node.left, *node.comparators):
            _check(a, src)
    elif isinstance(node, ast.BoolOp) and condition:
        for a in node.values:
            _check(a, src, condition=True)
    elif isinstance(node, (ast.Compare, ast.BoolOp)):
        raise _bad(src, "comparisons are allowed only in where(condition, a, b)")
    else:
        what = {
            ast.Attribute: "attributes (a.b)",
            ast.Subscript: "indexing (a[i])",
            ast.Lambda: "lambda",
            ast.IfExp: "'a if c else b' (use where(c, a, b))",
        }.get(type(node), f"{type(node).__name__} expressions")
        raise _bad(src, f"{what}: not allowed in a formula")
    return node


def _names(node: ast.AST) -> list[str]:
    """Free names in order of first appearance (left to right)."""
    out: list[str] = []

    def visit(n: ast.AST) -> None:
        if isinstance(n, ast.Name):
            if n.id not in out:
                out.append(n.id)
            return
        if isinstance(n, ast.Call):
            for a in n.args:
                visit(a)
            return
        for child in ast.iter_child_nodes(n):
            visit(child)

    visit(node)
    return out


def _substitute(node: ast.expr, table: Mapping[str, ast.expr]) -> ast.expr:
    """A copy of `node` with each name of `table` replaced by a copy of its expression."""

    class Sub(ast.NodeTransformer):
        def visit_Name(self, n: ast.Name):
            return copy.deepcopy(table[n.id]) if n.id in table else n

        def visit_Call(self, n: ast.Call):
            n.args = [self.visit(a) for a in n.args]
            return n

    return Sub().visit(copy.deepcopy(node))


# ---- evaluation ---------------------------------------------------------------------------------
def _functions(mod) -> dict[str, Callable]:
    return {
        "exp": mod.exp,
        "log": mod.log,
        "log2": mod.log2,
        "log10": mod.log10,
        "sqrt": mod.sqrt,
        "abs": mod.abs,
        "tanh": mod.tanh,
        "minimum": mod.minimum,
        "maximum": mod.maximum,
        "where": mod.where,
    }


def compile_expr(node: ast.expr, mod) -> Callable[[Mapping[str, object]], object]:
    """`node` as a function of an environment {name: value} on numpy (`mod=np`) or jax
    (`mod=jnp`) arrays: a tree of closures over the whitelisted nodes (no `eval`)."""
    fns = _functions(mod)
    if isinstance(node, ast.Constant):
        v = float(node.value)
        return lambda env: v
    if isinstance(node, ast.Name):
        name = node.id
        return lambda env: env[name]
    if isinstance(node, ast.BinOp):
        left, right = compile_expr(node.left, mod), compile_expr(node.right, mod)
        if isinstance(node.op, ast.Pow):
            if isinstance(node.right, ast.Constant) and float(node.right.value) == 2.0:
                return lambda env: (lambda b: b * b)(left(env))  # a square of a negative base is fine
            return lambda env: mod.power(left(env), right(env))
        op = _BINOPS[type(node.op)]
        return lambda env: op(left(env), right(env))
    if isinstance(node, ast.UnaryOp):
        inner = compile_expr(node.operand, mod)
        return (lambda env: -inner(env)) if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.Call):
        fn = fns[node.func.id]
        args = [compile_expr(a, mod) for a in node.args]
        return lambda env: fn(*(a(env) for a in args))
    if isinstance(node, ast.Compare):
        parts = [compile_expr(a, mod) for a in (node.left, *node.comparators)]
        ops = [getattr(mod, _CMPOPS[type(op)]) for op in node.ops]

        def compare(env):
            vals = [p(env) for p in parts]
            out = ops[0](vals[0], vals[1])
            for i in range(1, len(ops)):
                out = mod.logical_and(out, ops[i](vals[i], vals[i + 1]))
            return out

        return compare
    if isinstance(node, ast.BoolOp):
        parts = [compile_expr(a, mod) for a in node.values]
        combine = mod.logical_and if isinstance(node.op, ast.And) else mod.logical_or

        def boolop(env):
            out = parts[0](env)
            for p in parts[1:]:
                out = combine(out, p(env))
            return out

        return boolop
    raise AssertionError(f"unchecked node {type(node).__name__}")  # `_check` refused it already


def compile_formula(formula: Formula, mod) -> Callable[[Mapping[str, object]], object]:
    """The whole formula (helpers evaluated once each, in order) as a function of {name: value}."""
    helpers = [(name, compile_expr(expr, mod)) for name, expr in formula.helpers]
    body = compile_expr(formula.body, mod)

    def f(env):
        env = dict(env)
        for name, h in helpers:
            env[name] = h(env)
        return body(env)

    return f


# ---- names: inputs and parameters ---------------------------------------------------------------
@dataclass(frozen=True)
class ParamOption:
    """What `--param NAME=...` said about one parameter: bounds and/or a start value."""

    bounds: tuple[float, float] | None = None
    start: float | None = None


def parse_param_options(items: Sequence[str] | None) -> dict[str, ParamOption]:
    """`--param NAME=LO:HI` (bounds; `inf`, `-inf` allowed) and `--param NAME=VALUE` (a start),
    repeatable; one error line for anything else."""
    out: dict[str, ParamOption] = {}
    for item in items or []:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            name, sep, value = part.partition("=")
            name, value = name.strip(), value.strip()
            try:
                if not sep or not name.isidentifier():
                    raise ValueError
                prev = out.get(name, ParamOption())
                if ":" in value:
                    lo, hi = (float(v) for v in value.split(":"))
                    if math.isnan(lo) or math.isnan(hi) or not lo < hi:
                        raise AnalysisError(f"--param {part}: the bounds must satisfy LO < HI")
                    out[name] = ParamOption((lo, hi), prev.start)
                else:
                    v = float(value)
                    if not math.isfinite(v):
                        raise ValueError
                    out[name] = ParamOption(prev.bounds, v)
            except ValueError:
                raise AnalysisError(
                    f"--param expects NAME=LO:HI (bounds) or NAME=VALUE (a start), e.g. alpha=0:3 or "
                    f"E=1.8; got {part!r}"
                ) from None
    for name, opt in out.items():
        if opt.bounds and opt.start is not None and not opt.bounds[0] < opt.start < opt.bounds[1]:
            raise AnalysisError(f"--param {name}: the start {opt.start:g} is outside its bounds {opt.bounds}")
    return out


def parse_inputs(items: Sequence[str] | None) -> dict[str, str]:
    """`--input ALIAS=COLUMN` or `--input COLUMN` (repeatable, comma-separable) -> {alias: column}."""
    out: dict[str, str] = {}
    for item in items or []:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            alias, sep, column = part.partition("=")
            alias, column = alias.strip(), (column.strip() if sep else alias.strip())
            if not alias.isidentifier() or not column:
                raise AnalysisError(
                    f"--input expects NAME=COLUMN or COLUMN, NAME a name the formula can use (letters, "
                    f"digits, _): got {part!r}"
                )
            if alias in out and out[alias] != column:
                raise AnalysisError(f"--input {alias} is given twice ({out[alias]!r} and {column!r})")
            out[alias] = column
    return out


@dataclass(frozen=True)
class Binding:
    """Which free names of a formula are inputs (name -> column) and which are parameters."""

    inputs: dict[str, str]  # formula name -> table column, in order of first appearance
    params: tuple[str, ...]  # in order of first appearance


def _input_like(formula: Formula, params: set[str]) -> list[str]:
    """Free names standing where an input belongs: the base of a power whose exponent holds a
    parameter (`Q**alpha`), or the argument of a log or a square root."""
    out: list[str] = []
    for node in ast.walk(formula.inlined):
        cands = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and isinstance(node.left, ast.Name):
            if set(_names(node.right)) & params:
                cands.append(node.left.id)
        if isinstance(node, ast.Call) and node.func.id in _LOGS and isinstance(node.args[0], ast.Name):
            cands.append(node.args[0].id)
        out += [c for c in cands if c in params and c not in out]
    return out


def bind(
    formula: Formula,
    columns: Sequence[str],
    inputs: Mapping[str, str],
    param_options: Mapping[str, ParamOption],
    target: str,
    group: str | None = None,
) -> Binding:
    """Split the formula's free names into inputs and parameters (the rule of the module docstring);
    one error line for an `--input` column the table lacks, a formula without inputs, a name where
    an input belongs that is no column, or the target used as an input."""
    cols = [str(c) for c in columns]
    shown = ", ".join(cols[:20]) + (" ..." if len(cols) > 20 else "")
    for alias, column in inputs.items():
        if column not in cols:
            raise AnalysisError(
                f"--input {alias}={column}: the table has no column {column!r}; its columns: {shown}"
            )
    found: dict[str, str] = {}
    params: list[str] = []
    for name in formula.names:
        if name in inputs:
            found[name] = inputs[name]
        elif name in param_options:
            params.append(name)
        elif name in cols:
            found[name] = name
        else:
            params.append(name)
    for name, column in found.items():
        if column == target:
            raise AnalysisError(
                f"formula {formula.text!r}: {name} is the target column {target!r}; a law predicts its "
                f"target from other columns (--target names the column to predict)"
            )
        if group is not None and column == group:
            raise AnalysisError(
                f"formula {formula.text!r}: {name} is the --group column; groups get their own "
                f"parameters, they are not an input"
            )
    suspects = _input_like(formula, set(params))
    if suspects:
        q = suspects[0]
        raise AnalysisError(
            f"formula {formula.text!r}: {q} is neither a column nor an --input (it stands where an input "
            f"belongs); name its column with --input {q}=COLUMN (columns: {shown})"
        )
    if not found:
        raise AnalysisError(
            f"formula {formula.text!r} uses no input: every name ({', '.join(formula.names)}) is a "
            f"parameter; use column names or --input NAME=COLUMN (columns: {shown})"
        )
    if not params:
        raise AnalysisError(f"formula {formula.text!r} has no parameter to fit: every name is a column")
    for name in param_options:
        if name not in params:
            raise AnalysisError(
                f"--param {name}: the formula has no parameter {name} (parameters: {', '.join(params)})"
            )
    return Binding(found, tuple(params))


# ---- roles --------------------------------------------------------------------------------------
EXPONENT, POSITIVE, OFFSET, RATE, COEFFICIENT = "exponent", "positive", "offset", "rate", "coefficient"
EXPONENT_BOUNDS, SIGNED_EXPONENT_BOUNDS = (0.0, 3.0), (-3.0, 3.0)


@dataclass(frozen=True)
class Role:
    """A parameter's role, default bounds, and what its starts are scaled by: the subexpression it
    multiplies, divides or is added to (`partner`), evaluated on the data for a magnitude."""

    kind: str
    bounds: tuple[float, float]
    partner: ast.expr | None = None
    partner_op: str = ""  # add, sub (the parameter subtracted), mul, div (the parameter divides)

    def to_dict(self) -> dict:
        return {"role": self.kind, "bounds": list(self.bounds)}


@dataclass
class _Ctx:
    exponent: bool = False  # inside the exponent of a power of an input
    signed: bool = False  # that exponent's sign is written (N**-a, or the power in a denominator)
    in_exp: bool = False  # inside the argument of an exponential of an input
    exp_denominator: bool = False  # ... and in a denominator there
    positive: bool = False  # inside a log, a square root or a power's base
    top: bool = True  # on the top-level sum
    denominator: bool = False


def infer_roles(formula: Formula, inputs: set[str], params: Sequence[str]) -> dict[str, Role]:
    """Each parameter's role (module docstring) from where it appears in the inlined formula."""
    tree = formula.inlined
    occ: dict[str, list[tuple[str, _Ctx, ast.expr | None, str]]] = {p: [] for p in params}

    def dep(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in inputs for n in ast.walk(node))

    def record(node, ctx, partner=None, op=""):
        if isinstance(node, ast.Name) and node.id in occ:
            occ[node.id].append(("", ctx, partner, op))

    def visit(node, ctx: _Ctx):
        if isinstance(node, ast.Name):
            if node.id in occ and not occ[node.id]:
                occ[node.id].append(("", ctx, None, ""))
            return
        if isinstance(node, ast.BinOp):
            left, right = node.left, node.right
            if isinstance(node.op, (ast.Add, ast.Sub)):
                record(left, ctx, right, "add")
                record(right, ctx, left, "sub" if isinstance(node.op, ast.Sub) else "add")
                visit(left, ctx)
                visit(right, ctx)
            elif isinstance(node.op, (ast.Mult, ast.Div)):
                sub = _Ctx(**{**ctx.__dict__, "top": False})
                record(left, sub, right, "mul")
                visit(left, sub)
                den = _Ctx(**{**sub.__dict__})
                if isinstance(node.op, ast.Div):
                    den.denominator = not ctx.denominator
                    den.exp_denominator = ctx.in_exp
                record(right, den, left, "div" if isinstance(node.op, ast.Div) else "mul")
                visit(right, den)
            else:  # power
                const_int = isinstance(right, ast.Constant) and float(right.value).is_integer()
                base_ctx = _Ctx(**{**ctx.__dict__, "top": False, "positive": ctx.positive or not const_int})
                visit(left, base_ctx)
                exp_ctx = _Ctx(**{**ctx.__dict__, "top": False})
                if dep(left):
                    exp_ctx.exponent = True
                    negated = isinstance(right, ast.UnaryOp) and isinstance(right.op, ast.USub)
                    bare = isinstance(right, ast.Name) or (negated and isinstance(right.operand, ast.Name))
                    exp_ctx.signed = bare and (negated != ctx.denominator)
                elif dep(right):
                    exp_ctx.in_exp = True
                record(right, exp_ctx, left, "pow")
                visit(right, exp_ctx)
            return
        if isinstance(node, ast.UnaryOp):
            record(node.operand, ctx, None, "neg")
            visit(node.operand, ctx)
            return
        if isinstance(node, ast.Call):
            name = node.func.id
            for a in node.args:
                sub = _Ctx(**{**ctx.__dict__, "top": False})
                if name == "exp" and dep(a):
                    sub.in_exp, sub.exp_denominator = True, False
                if name in _LOGS:
                    sub.positive = True
                record(a, sub, None, "call")
                visit(a, sub)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, _Ctx(**{**ctx.__dict__, "top": False}))

    visit(tree, _Ctx())
    roles = {}
    for p in params:
        roles[p] = _role(occ[p], dep)
    return roles


def _positive_term(node: ast.AST, dep) -> bool:
    """A term that is positive wherever the law makes sense: a power or exponential of an input,
    or a product, quotient or sum of such terms with parameters and positive numbers."""
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            return dep(node.left) and not isinstance(node.right, ast.Constant)
        if isinstance(node.op, (ast.Mult, ast.Div, ast.Add)):
            sides = (node.left, node.right)
            return any(_positive_term(s, dep) for s in sides) and all(
                _positive_term(s, dep) or isinstance(s, ast.Name) and not dep(s) or _positive_const(s)
                for s in sides
            )
        return False
    if isinstance(node, ast.Call):
        return node.func.id == "exp" and dep(node.args[0])
    return False


def _positive_const(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and float(node.value) > 0


def _role(occs, dep) -> Role:
    """The role of a parameter from its occurrences (the most telling one wins); its partner, for
    the starts' magnitude, from the most telling occurrence: a time constant's numerator, an inner
    sum's other term, a divided quantity, else a multiplied one."""
    if not occs:
        return Role(COEFFICIENT, (-math.inf, math.inf))
    exps = [c for _, c, _, _ in occs if c.exponent]
    if exps:
        signed = all(c.signed for c in exps)
        return Role(EXPONENT, EXPONENT_BOUNDS if signed else SIGNED_EXPONENT_BOUNDS)

    def rank(o):
        _, ctx, partner, op = o
        if partner is None:
            return 9
        if ctx.in_exp and ctx.exp_denominator and op == "div":
            return 0
        return {"add": 1, "sub": 1, "div": 2, "mul": 3}.get(op, 8)

    best = min(occs, key=rank)
    _, _, partner, op = best
    kind = None
    if any(ctx.positive for _, ctx, _, _ in occs):
        kind = POSITIVE
    elif any(ctx.in_exp and ctx.exp_denominator and o == "div" for _, ctx, _, o in occs):
        kind = POSITIVE
    elif any(ctx.in_exp for _, ctx, _, _ in occs):
        kind = RATE
    elif any(o in ("mul", "div") and q is not None and _positive_term(q, dep) for _, _, q, o in occs):
        kind = POSITIVE
    elif any(ctx.top and o in ("add", "sub", "neg", "") for _, ctx, _, o in occs):
        kind = OFFSET
    elif any(o in ("add", "sub") and q is not None and _positive_term(q, dep) for _, _, q, o in occs):
        kind = POSITIVE
    else:
        kind = COEFFICIENT
    bounds = (0.0, math.inf) if kind == POSITIVE else (-math.inf, math.inf)
    return Role(kind, bounds, partner, op)


def law_name(key: str) -> str:
    """The registry name of a formula law: `formula_` and a digest of what defines it."""
    return "formula_" + hashlib.sha256(key.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class FormulaSpec:
    """A formula bound to a table: its inputs, parameters, their roles and bounds, and options."""

    formula: Formula
    binding: Binding
    roles: dict[str, Role]
    bounds: dict[str, tuple[float, float]]  # the defaults from the roles, --param's where given
    starts: dict[str, float] = field(default_factory=dict)  # --param NAME=VALUE

    @property
    def params(self) -> tuple[str, ...]:
        return self.binding.params

    @property
    def inputs(self) -> dict[str, str]:
        return self.binding.inputs


def make_spec(
    formula: Formula | str,
    columns: Sequence[str],
    inputs: Mapping[str, str] | None = None,
    param_options: Mapping[str, ParamOption] | None = None,
    target: str = "loss",
    group: str | None = None,
) -> FormulaSpec:
    """Parse (if given text), bind and infer roles: everything but the data's values."""
    f = parse(formula) if isinstance(formula, str) else formula
    opts = dict(param_options or {})
    binding = bind(f, columns, dict(inputs or {}), opts, target, group)
    roles = infer_roles(f, set(binding.inputs), binding.params)
    bounds = {
        p: (opts[p].bounds if p in opts and opts[p].bounds else roles[p].bounds) for p in binding.params
    }
    starts = {p: opts[p].start for p in binding.params if p in opts and opts[p].start is not None}
    return FormulaSpec(f, binding, roles, bounds, starts)


# ---- the numeric model: parameter values per row, inputs, the formula on numpy ----------------------
def _reference(spec: FormulaSpec) -> dict[str, float]:
    """A value per parameter where most formulas are finite: exponents 0.3 (0.45 when positive),
    positive parameters 1, free ones 0; --param starts where given."""
    ref = {}
    for q in spec.params:
        r, (lo, hi) = spec.roles[q], spec.bounds[q]
        v = 0.45 if r.kind == EXPONENT and lo >= 0 else 0.3 if r.kind == EXPONENT else 1.0 if lo >= 0 else 0.0
        ref[q] = spec.starts.get(
            q, float(np.clip(v, lo, hi)) if lo < v < hi else (lo + hi) / 2 if math.isfinite(lo + hi) else v
        )
    return ref


def _partner_values(spec: FormulaSpec, p: str, x: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """The values on the data of what parameter `p` multiplies, divides or is added to, the other
    parameters at `_reference` values; None when unknown."""
    role = spec.roles[p]
    if role.partner is None:
        return None
    try:
        with np.errstate(all="ignore"):
            v = compile_expr(role.partner, np)({**_reference(spec), **x})
    except (KeyError, TypeError, ValueError):
        return None
    v = np.broadcast_to(np.asarray(v, dtype=float), np.shape(next(iter(x.values())))).ravel()
    v = v[np.isfinite(v)]
    return v if v.size else None


def default_grid(spec: FormulaSpec, p: str, x: Mapping[str, np.ndarray], y: np.ndarray) -> np.ndarray:
    """Start values of a nonlinear parameter from its role (public units, inside its bounds)."""
    if p in spec.starts:
        return np.array([spec.starts[p]])
    role, (lo, hi) = spec.roles[p], spec.bounds[p]
    partner = _partner_values(spec, p, x)
    mag = float(np.median(np.abs(partner))) if partner is not None else 1.0
    if role.partner_op == "mul" and role.kind == POSITIVE:  # p * X ~ the target's scale
        mag = float(np.median(np.abs(y))) / mag if mag > 0 else 1.0
    mag = mag if math.isfinite(mag) and mag > 0 else 1.0
    if role.kind == EXPONENT:
        if lo >= 0 and math.isfinite(hi):
            g = lo + (hi - lo) * np.array([0.03, 0.08, 0.15, 0.25, 0.4])
        elif math.isfinite(lo) and math.isfinite(hi):
            g = np.array([-0.35, -0.12, -0.03, 0.03, 0.12, 0.35]) * min(hi, -lo)
        else:
            g = np.array([-1.0, -0.3, -0.1, 0.1, 0.3, 1.0])
    elif lo >= 0:
        g = mag * 10.0 ** np.arange(-2.0, 2.01)
    elif role.kind == OFFSET:
        ymin, ymax = float(np.min(y)), float(np.max(y))
        g = np.array([ymin - 0.5 * (ymax - ymin), ymin - 0.05 * (ymax - ymin), 0.0])
    elif role.partner_op in ("add", "sub") and partner is not None:
        qs = np.quantile(partner, [0.1, 0.5, 0.9])
        g = np.concatenate([qs if role.partner_op == "sub" else -qs, [0.0]])
    else:  # a free factor of something that varies over the rows: p * partner's spread ~ 0.1 .. 1
        spread = float(np.std(partner)) if partner is not None and np.std(partner) > 0 else mag
        g = np.array([-1.0, -0.3, -0.1, 0.0, 0.1, 0.3, 1.0]) / spread
    lo_in = (
        lo + 1e-3 * (hi - lo if math.isfinite(hi - lo) else max(1.0, abs(lo)))
        if math.isfinite(lo)
        else -np.inf
    )
    hi_in = (
        hi - 1e-3 * (hi - lo if math.isfinite(hi - lo) else max(1.0, abs(hi)))
        if math.isfinite(hi)
        else np.inf
    )
    return np.unique(np.clip(g, lo_in, hi_in))


def linear_params(
    spec: FormulaSpec,
    evaluate: Callable[[Mapping[str, np.ndarray]], np.ndarray],
    x,
    params_ref: Mapping,
    log: bool = False,
) -> list[str]:
    """The parameters the formula (its log with `log`: `exp(d + a * log(N))`) is jointly affine in,
    tested numerically at random values of the others: those are solved by least squares at every
    start instead of gridded."""
    rng = np.random.default_rng(0)
    cands = [p for p in spec.params if p not in spec.starts]

    def f(over):
        with np.errstate(all="ignore"):
            v = np.asarray(evaluate({**x, **params_ref, **over}), dtype=float)
            return np.log(v) if log else v

    def affine(names) -> bool:
        if not names:
            return True
        u = {p: rng.uniform(0.5, 2.0) for p in names}
        v = {p: rng.uniform(0.5, 2.0) for p in names}
        zero = {p: 0.0 for p in names}
        a, b, c, d = f(zero), f(u), f(v), f({p: u[p] + v[p] for p in names})
        t = {p: 2.5 * u[p] for p in names}
        e = f(t)
        ok = np.all(np.isfinite([a, b, c, d, e]))
        scale = np.max(np.abs([a, b, c, d, e])) + 1e-300
        return bool(
            ok
            and np.max(np.abs(d - b - c + a)) <= 1e-9 * scale
            and np.max(np.abs(e - a - 2.5 * (b - a))) <= 1e-9 * scale
        )

    chosen: list[str] = []
    for p in cands:
        if affine([p]) and affine([*chosen, p]):
            chosen.append(p)
    return chosen


def combos(grids: Sequence[np.ndarray], cap: int, seed: int = 0) -> np.ndarray:
    """(S, k) combinations of per-parameter start values: the full product up to `cap`, else a
    seeded sample of `cap` of them (each value of each parameter equally often)."""
    k = len(grids)
    if k == 0:
        return np.zeros((1, 0))
    total = math.prod(len(g) for g in grids)
    if total <= cap:
        return np.array(list(itertools.product(*grids)), dtype=float)
    rng = np.random.default_rng(seed)
    cols = [np.asarray(g, float)[rng.permutation(np.arange(cap) % len(g))] for g in grids]
    return np.stack(cols, axis=1)


# ---- the formula as an engine law ------------------------------------------------------------------
GROUP_INPUT = "__group__"  # the law's input holding each row's group number + 1 (with --group)
LOG, LINEAR = "log", "linear"  # residuals: log y - log f (a positive target), or (y - f) / scale
START_CAP = 1024  # nonlinear start combinations tried per group (a seeded sample beyond it)
SHARED_CAP = 48  # combinations of the shared nonlinear parameters (with --group)


def _where(src: str, node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001 - only for a message
        return src


@dataclass(frozen=True, eq=False)
class FormulaModel:
    """A bound formula as a registry `Law`: one parameter vector (a copy of each parameter per
    group unless shared), inputs encoded for the engine (which takes logs: an input with values
    <= 0 is shifted by `shifts[name]`; the group number + 1 is one more input), residuals in log
    space for a positive target, else (y - f) / `y_scale` (the target passed as exp(y / y_scale),
    the law returning f / y_scale: the engine's log residual is then the scaled linear one)."""

    spec: FormulaSpec
    target: str
    groups: tuple[str, ...] = ()
    shared: frozenset[str] = frozenset()
    shifts: tuple[tuple[str, float], ...] = ()
    mode: str = LOG
    y_scale: float = 1.0
    scale: str = ""
    registered_name: str = ""  # the registry name (default: `formula_` and a digest of the law)
    protocols: tuple[str, ...] = ()  # backtest protocols that score it (`groups.register_formula`)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(self.spec.inputs)

    def per_group(self, p: str) -> bool:
        return bool(self.groups) and p not in self.shared

    @cached_property
    def engine_names(self) -> tuple[str, ...]:
        """The engine's parameter names: `p`, or `p[group]` for each group of a parameter not shared."""
        out = []
        for p in self.spec.params:
            out += [f"{p}[{g}]" for g in self.groups] if self.per_group(p) else [p]
        return tuple(out)

    @cached_property
    def index(self) -> dict[str, tuple[int, ...]]:
        """Formula parameter -> its columns of the engine vector (one, or one per group)."""
        out, i = {}, 0
        for p in self.spec.params:
            n = len(self.groups) if self.per_group(p) else 1
            out[p] = tuple(range(i, i + n))
            i += n
        return out

    @cached_property
    def engine_bounds(self) -> tuple[tuple[float, float], ...]:
        b = []
        for p in self.spec.params:
            b += [tuple(float(v) for v in self.spec.bounds[p])] * len(self.index[p])
        return tuple(b)

    @property
    def key(self) -> str:
        return " | ".join(
            map(
                str,
                (
                    self.spec.formula.text,
                    sorted(self.spec.inputs.items()),
                    self.spec.params,
                    [self.spec.bounds[p] for p in self.spec.params],
                    self.target,
                    self.groups,
                    sorted(self.shared),
                    self.shifts,
                    self.mode,
                    repr(self.y_scale),
                    self.scale,
                ),
            )
        )

    @cached_property
    def name(self) -> str:
        return self.registered_name or law_name(self.key)

    @cached_property
    def np_fn(self) -> Callable:
        return compile_formula(self.spec.formula, np)

    # -- encoding ------------------------------------------------------------------------------------
    @property
    def law_inputs(self) -> tuple[str, ...]:
        return self.input_names + ((GROUP_INPUT,) if self.groups else ())

    def encode(self, x: Mapping[str, np.ndarray], gidx: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Inputs as the law takes them (positive: shifted where needed; the group number + 1)."""
        shifts = dict(self.shifts)
        out = {k: np.asarray(x[k], float) + shifts.get(k, 0.0) for k in self.input_names}
        if self.groups:
            out[GROUP_INPUT] = np.asarray(gidx, float) + 1.0
        return out

    def encode_y(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, float)
        return y if self.mode == LOG else np.exp(y / self.y_scale)

    def decode_y(self, v: np.ndarray) -> np.ndarray:
        """A law prediction (or interval bound) back in the target's units."""
        v = np.asarray(v, float)
        if self.mode == LOG:
            return v
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.y_scale * np.log(v)

    # -- evaluation ---------------------------------------------------------------------------------
    def env(self, theta: np.ndarray, gidx: np.ndarray | None, mod=np) -> dict:
        """{formula parameter: value} from public engine vectors `theta` (..., P): a scalar (or a
        column over starts) per parameter, per row for the per-group ones."""
        out = {}
        for p, idx in self.index.items():
            if len(idx) == 1:
                out[p] = theta[..., idx[0]]
                if mod is np and np.ndim(out[p]) > 0:
                    out[p] = out[p][..., None]
            else:
                cols = (
                    theta[..., list(idx)] if mod is np else mod.stack([theta[..., i] for i in idx], axis=-1)
                )
                out[p] = cols[..., gidx]
        return out

    def evaluate(self, theta: np.ndarray, x: Mapping[str, np.ndarray], gidx: np.ndarray | None = None):
        """The formula (target units) at public engine vectors `theta` ((P,) or (S, P)) on rows `x`."""
        theta = np.asarray(theta, float)
        with np.errstate(all="ignore"):
            out = self.np_fn({**{k: np.asarray(v, float) for k, v in x.items()}, **self.env(theta, gidx)})
        n = len(next(iter(x.values())))
        return np.broadcast_to(np.asarray(out, float), theta.shape[:-1] + (n,))

    @cached_property
    def law(self):
        """The registry `Law` (registered on first use, under `name`)."""
        # deferred: JAX, SciPy and the formula modules load when a command runs (a fast --help)
        import jax
        import jax.numpy as jnp

        from analysis.laws import registry

        jfn = compile_formula(self.spec.formula, jnp)
        shifts = dict(self.shifts)
        names, grouped, mode, s = self.input_names, bool(self.groups), self.mode, float(self.y_scale)
        index = self.index

        def log_form(view, logX):
            env = {}
            for k, name in enumerate(names):
                v = jnp.exp(logX[k])
                env[name] = v - shifts[name] if shifts.get(name) else v
            g = jnp.round(jnp.exp(logX[-1])).astype(jnp.int32) - 1 if grouped else None
            for p, idx in index.items():
                env[p] = view[idx[0]] if len(idx) == 1 else jnp.stack([view[i] for i in idx])[g]
            f = jfn(env)
            return jnp.log(f) if mode == LOG else f / s

        def grid(logX, logy):  # the generic path (fit_law, backtests): starts from the data given
            x = {k: np.exp(np.asarray(logX[j])) - shifts.get(k, 0.0) for j, k in enumerate(names)}
            gidx = np.round(np.exp(np.asarray(logX[-1]))).astype(int) - 1 if grouped else None
            y = np.exp(np.asarray(logy)) if mode == LOG else s * np.asarray(logy)
            return self.starts(x, y, gidx)

        del jax
        names_out = self.engine_names
        # deferred: JAX, SciPy and the formula modules load when a command runs (a fast --help)
        from analysis.laws.allocation import chinchilla_index

        if chinchilla_index(names_out) is not None:  # never read as a Chinchilla law (allocation, frontier)
            raise AnalysisError("internal: a formula law must not carry Chinchilla's parameter layout")
        law = registry.Law(
            name=self.name,
            param_names=names_out,
            inputs=self.law_inputs,
            log_form=log_form,
            log_params=(False,) * len(names_out),
            grid=grid,
            bounds=self.engine_bounds,
            formula=self.spec.formula.text,
            description="a user's formula (scalelab fit --formula); inputs "
            + ", ".join(f"{k}={c}" for k, c in self.spec.inputs.items()),
            min_distinct={k: 2 for k in names},
            scale=self.scale or names[0],
        )
        registry.register(law, replace=True)
        # a method of the registry (analysis.laws.methods listens): `backtest` scores it under the
        # protocols it names (none for a command line's formula)
        registry.USER_LAWS[self.name] = self.protocols
        for listener in registry.ON_REGISTER:
            listener(self.name, self.protocols)
        return law

    # -- starts -------------------------------------------------------------------------------------
    def _objective(self, pred: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Sum of squared residuals in fit space per row of `pred` (S, n); inf where not finite."""
        with np.errstate(all="ignore"):
            r = np.log(y) - np.log(pred) if self.mode == LOG else (y - pred) / self.y_scale
            out = np.sum(np.where(w > 0, w * r * r, 0.0), axis=-1)
        return np.where(np.isfinite(out), out, np.inf)

    def _fit_weights(self, y: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Weights making linear least squares approximate the fit's residuals."""
        return w / (y * y) if self.mode == LOG else w / self.y_scale**2

    @cached_property
    def _linear_cache(self) -> dict:
        return {}

    def linear(self, x: Mapping[str, np.ndarray], fixed: Mapping[str, float]) -> tuple[list[str], bool]:
        """(the parameters solved by least squares at each start, whether in log space): those the
        formula is affine in, or, for a positive target, those its log is affine in when they are
        more (a law written as exp(...) of a polynomial)."""
        key = tuple(sorted(fixed))
        if key not in self._linear_cache:
            ref = {**_reference(self.spec), **fixed}
            found = [p for p in linear_params(self.spec, self.np_fn, x, ref) if p not in fixed]
            logs: list[str] = []
            if self.mode == LOG:
                logs = [p for p in linear_params(self.spec, self.np_fn, x, ref, log=True) if p not in fixed]
            self._linear_cache[key] = (logs, True) if len(logs) > len(found) else (found, False)
        return self._linear_cache[key]

    def _space(self, log: bool, y: np.ndarray, w: np.ndarray):
        """(function of an environment, target, least-squares weights) in linear or log space."""
        if not log:
            return self.np_fn, y, self._fit_weights(y, w)
        return (lambda env: np.log(self.np_fn(env))), np.log(y), w

    def _varpro(self, env: dict, lin: list[str], x: dict, y: np.ndarray, w: np.ndarray, log: bool = False):
        """Least-squares values of the linear parameters `lin` for each of S settings of the others
        (`env`: arrays (S, 1) or scalars), clipped to their bounds, and the objective of each (in
        log space with `log`: `lin` are then the parameters the formula's log is affine in)."""
        S = max([np.shape(v)[0] for v in env.values() if np.ndim(v) > 0] or [1])
        base = {**x, **env}
        fn, yt, wt = self._space(log, y, w)

        def at(over):
            return np.broadcast_to(np.asarray(fn({**base, **over}), float), (S, y.size))

        with np.errstate(all="ignore"):
            f0 = at({p: 0.0 for p in lin})
            cols = [at({q: float(q == p) for q in lin}) - f0 for p in lin]
        coef = np.zeros((S, len(lin)))
        if lin:
            sw = np.sqrt(wt)
            A = np.stack(cols, axis=-1) * sw[None, :, None]
            b = (yt[None, :] - f0) * sw[None, :]
            ok = np.all(np.isfinite(A), axis=(1, 2)) & np.all(np.isfinite(b), axis=1)
            A, b = np.where(ok[:, None, None], A, 0.0), np.where(ok[:, None], b, 0.0)
            norms = np.sqrt(np.sum(A * A, axis=1))
            norms = np.where(norms > 0, norms, 1.0)
            An = A / norms[:, None, :]
            gram = np.einsum("snk,snl->skl", An, An) + 1e-12 * np.eye(len(lin))[None]
            rhs = np.einsum("snk,sn->sk", An, b)
            try:
                coef = np.linalg.solve(gram, rhs[..., None])[..., 0] / norms
            except np.linalg.LinAlgError:
                coef = np.stack([np.linalg.lstsq(g, r, rcond=None)[0] for g, r in zip(gram, rhs)]) / norms
            coef = np.where(ok[:, None], coef, np.nan)
            lo = np.array([self.spec.bounds[p][0] for p in lin])
            hi = np.array([self.spec.bounds[p][1] for p in lin])
            coef = np.clip(coef, lo, hi)
            pred = f0 + np.einsum("sk,snk->sn", np.nan_to_num(coef), np.stack(cols, axis=-1))
        else:
            pred = f0
        with np.errstate(all="ignore"):
            score = self._objective(np.exp(pred) if log else pred, y, w)
        return coef, np.where(np.all(np.isfinite(coef), axis=1), score, np.inf)

    def _joint(
        self, nl: dict, lin: list[str], x: dict, y: np.ndarray, w: np.ndarray, gidx, log: bool = False
    ) -> tuple[dict, float]:
        """All linear parameters (a column per group for those not shared) by bounded least squares,
        the nonlinear ones `nl` given per row: ({param: value or per-group array}, objective)."""
        # deferred: JAX, SciPy and the formula modules load when a command runs (a fast --help)
        from scipy.optimize import lsq_linear

        n = y.size
        G = max(1, len(self.groups))
        base = {**x, **nl}
        fn, yt, wt = self._space(log, y, w)
        with np.errstate(all="ignore"):
            f0 = np.broadcast_to(np.asarray(fn({**base, **{p: 0.0 for p in lin}}), float), (n,))
            cols, owners, lo, hi = [], [], [], []
            for p in lin:
                b = (
                    np.broadcast_to(np.asarray(fn({**base, **{q: float(q == p) for q in lin}}), float), (n,))
                    - f0
                )
                parts = [(b * (gidx == g), g) for g in range(G)] if self.per_group(p) else [(b, None)]
                for col, g in parts:
                    cols.append(col)
                    owners.append((p, g))
                    lo.append(self.spec.bounds[p][0])
                    hi.append(self.spec.bounds[p][1])
        out: dict = {}
        pred = f0
        if cols:
            sw = np.sqrt(wt)
            A = np.stack(cols, axis=1) * sw[:, None]
            b = (yt - f0) * sw
            if not (np.all(np.isfinite(A)) and np.all(np.isfinite(b))):
                return {}, math.inf
            norms = np.sqrt(np.sum(A * A, axis=0))
            norms = np.where(norms > 0, norms, 1.0)
            lo_s, hi_s = np.array(lo) * norms, np.array(hi) * norms
            c = np.linalg.lstsq(A / norms, b, rcond=None)[0]
            if np.any(c < lo_s) or np.any(c > hi_s):
                method = "bvls" if A.shape[1] <= 40 else "trf"
                c = lsq_linear(A / norms, b, bounds=(lo_s, hi_s), method=method).x
            c = c / norms
            for (p, g), v in zip(owners, c):
                if g is None:
                    out[p] = float(v)
                else:
                    out.setdefault(p, np.zeros(G))[g] = v
            pred = f0 + np.stack(cols, axis=1) @ c
        with np.errstate(all="ignore"):
            return out, float(self._objective((np.exp(pred) if log else pred)[None, :], y, w)[0])

    def starts(
        self,
        x: Mapping[str, np.ndarray],
        y: np.ndarray,
        gidx: np.ndarray | None = None,
        w: np.ndarray | None = None,
        fixed: Mapping[str, float] | None = None,
        k: int = 64,
        extra: np.ndarray | None = None,
    ) -> np.ndarray:
        """(S <= k, P) public starts: nonlinear parameters over their role grids (the shared ones,
        then per group the others), the linear ones solved by least squares at each, the best by
        the fit's squared residuals kept (three quarters) with a seeded sample of the rest. `extra`
        (public vectors) join the candidates. One error line when the formula is not finite on the
        data at any start (a log of a negative value, ...)."""
        spec = self.spec
        x = {k_: np.asarray(v, float) for k_, v in x.items()}
        y = np.asarray(y, float)
        w = np.ones_like(y) if w is None else np.asarray(w, float)
        fixed = dict(fixed or {})
        G = max(1, len(self.groups))
        gidx = np.zeros(y.size, int) if gidx is None else np.asarray(gidx, int)
        lin, log = self.linear(x, fixed)
        nl = [p for p in spec.params if p not in lin]
        grids = {p: (np.array([fixed[p]]) if p in fixed else default_grid(spec, p, x, y)) for p in nl}
        shared_nl = [p for p in nl if not self.per_group(p)] if self.groups else []
        group_nl = [p for p in nl if p not in shared_nl]
        Cs = combos([grids[p] for p in shared_nl], SHARED_CAP)
        Cq = combos([grids[p] for p in group_nl], START_CAP if G == 1 else 256)
        r = 3 * k if G == 1 else max(3, k // max(1, len(Cs)))
        cands = []  # (shared values, (G, r) rows of Cq)
        for cs in Cs:
            picks = np.zeros((G, r), int)
            for g in range(G):
                rows = gidx == g
                if not rows.any():
                    continue
                env = {p: Cq[:, j][:, None] for j, p in enumerate(group_nl)}
                env.update({p: float(cs[j]) for j, p in enumerate(shared_nl)})
                xg = {k_: v[rows] for k_, v in x.items()}
                _, score = self._varpro(env, lin, xg, y[rows], w[rows], log)
                order = np.argsort(score, kind="stable")
                picks[g] = np.resize(order[:r], r)
            cands += [(cs, picks[:, j]) for j in range(r)]
        rng = np.random.default_rng(0)
        full, scores = [], []
        for cs, rows_q in cands:
            nlv: dict = {p: float(cs[j]) for j, p in enumerate(shared_nl)}
            for j, p in enumerate(group_nl):
                vals = Cq[rows_q, j]
                nlv[p] = vals[gidx] if self.per_group(p) else float(vals[0])
            linv, score = self._joint(nlv, lin, x, y, w, gidx, log)
            theta = np.zeros(len(self.engine_names))
            for p, idx in self.index.items():
                if p in linv:
                    v = linv[p]
                elif p in shared_nl or not self.per_group(p):
                    v = nlv[p] if np.ndim(nlv[p]) == 0 else float(np.asarray(nlv[p]).ravel()[0])
                else:
                    v = Cq[rows_q, group_nl.index(p)]
                theta[list(idx)] = v
            full.append(theta)
            scores.append(score)
        full, scores = np.array(full), np.array(scores)
        if extra is not None and len(extra):
            extra = np.atleast_2d(np.asarray(extra, float))
            full = np.vstack([full, extra])
            scores = np.concatenate([scores, self._objective(self.evaluate(extra, x, gidx), y, w)])
        finite = np.isfinite(scores)
        if not finite.any():
            raise self.diagnose(x, y)
        full, scores = np.unique(np.column_stack([scores, full])[finite], axis=0)[:, 1:], None
        scores = self._objective(self.evaluate(full, x, gidx), y, w)
        order = np.argsort(scores, kind="stable")
        n_top = min(len(order), max(1, (3 * k) // 4))
        rest = order[n_top:]
        pick = list(order[:n_top]) + list(rng.choice(rest, size=min(len(rest), k - n_top), replace=False))
        return full[pick]

    def diagnose(self, x: Mapping[str, np.ndarray], y: np.ndarray) -> AnalysisError:
        """Why the formula is not finite on the data at any start: the first log, square root or
        power whose argument is negative there, else the first row where it is not finite."""
        text = self.spec.formula.text
        env = {**_reference(self.spec), **x}
        n = y.size
        for node in ast.walk(self.spec.formula.inlined):
            arg, fn = None, ""
            if isinstance(node, ast.Call) and node.func.id in _LOGS:
                arg, fn = node.args[0], node.func.id
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
                r = node.right
                if not (isinstance(r, ast.Constant) and float(r.value).is_integer()):
                    arg, fn = node.left, "power"
            if arg is None:
                continue
            with np.errstate(all="ignore"):
                v = np.broadcast_to(np.asarray(compile_expr(arg, np)(env), float), (n,))
            bad = v <= 0 if fn.startswith("log") else v < 0
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                what = "the base of a power" if fn == "power" else f"{fn}()'s argument"
                sign = "negative" if v[i] < 0 else "zero"
                return AnalysisError(
                    f"formula {text!r}: a {'log' if fn.startswith('log') else fn} of a {sign} value: "
                    f"{what} {_where(text, arg)} is {v[i]:.4g} on row {i} ({int(bad.sum())} of {n} rows); "
                    f"change the formula or its bounds (--param NAME=LO:HI)"
                )
        with np.errstate(all="ignore"):
            f = np.broadcast_to(np.asarray(self.np_fn(env), float), (n,))
        bad = ~np.isfinite(f) | ((f <= 0) if self.mode == LOG else False)
        i = int(np.flatnonzero(bad)[0]) if bad.any() else 0
        why = "NaN or infinite" if not np.isfinite(f[i]) else f"{f[i]:.4g}, not positive (the target is)"
        return AnalysisError(
            f"formula {text!r} is not finite on the data at any start (row {i}: {why}); check the "
            f"inputs' scale, or give starts with --param NAME=VALUE"
        )

    def check_domain(self, x: Mapping[str, np.ndarray]) -> None:
        """One error line for a log, square root or power of the data alone (no parameter in its
        argument) that is negative on some row: no parameter value can fix it."""
        text = self.spec.formula.text
        params = set(self.spec.params)
        n = len(next(iter(x.values())))
        for node in ast.walk(self.spec.formula.inlined):
            arg, fn = None, ""
            if isinstance(node, ast.Call) and node.func.id in _LOGS:
                arg, fn = node.args[0], node.func.id
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
                r = node.right
                if not (isinstance(r, ast.Constant) and float(r.value).is_integer()):
                    arg, fn = node.left, "power"
            if arg is None or set(_names(arg)) & params:
                continue
            with np.errstate(all="ignore"):
                v = np.broadcast_to(np.asarray(compile_expr(arg, np)(dict(x)), float), (n,))
            bad = (v <= 0) if fn.startswith("log") else (v < 0)
            bad |= ~np.isfinite(v)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                kind = "log" if fn.startswith("log") else "square root" if fn == "sqrt" else "power"
                sign = "negative" if v[i] < 0 else "zero" if v[i] == 0 else "not finite"
                raise AnalysisError(
                    f"formula {text!r}: a {kind} of a {sign} value: {_where(text, arg)} is {v[i]:.4g} on "
                    f"row {i} ({int(bad.sum())} of {n} rows); the data alone make it undefined"
                )
