"""A whitelist LaTeX grammar that builds SymPy objects through constructors (paper, Appendix A: the verified arm).

Why our own grammar: SymPy's ``parse_latex`` returns plausible wrong expressions without
any error (``d \\cdot k`` read as a symbol ``dcdot``, ``a \\pm b`` as ``a*pm*b``, chained
relations crashing with ``TypeError``), and ``sympify``/``parse_expr`` evaluate Python.
This recursive-descent parser never evaluates text: every token is matched against a
fixed vocabulary and every SymPy object is built by calling a constructor (``Add``,
``Mul``, ``Pow``, ``Symbol`` …). Anything outside the vocabulary is rejected with a
reason (:class:`ParseError`), never guessed.

Reading rules (each one removes a whole class of silent misparses):

* juxtaposition is multiplication (``x^2y`` → ``x**2*y``, ``2^{n} k`` → ``2**n*k``), but a
  number right after a factor (``x2``, ``(a+b)3``), a mixed number (``2\\frac{1}{2}``) and
  a product after ``/`` (``1/2x``) are ambiguous and rejected;
* a superscript or subscript is one TeX token or a brace group; ``x^23`` and ``x_12``
  (TeX reads ``x^2·3``) are rejected as ambiguous;
* point names (a capital letter with its primes and subscript) in a row are one geometric
  name whatever the blanks between them, since TeX ignores those blanks: ``AP_1``,
  ``A P_{1}`` and ``A P_1`` are the same name, and ``AB CD`` is ``ABCD`` (a product of
  lengths needs an operator: ``AB \\cdot CD``). So a Ptolemy-type relation is never
  expanded as a product of points (see the notation rule below);
* ``letter(`` is a function application only for letters the problem uses as functions
  (:func:`function_letters`) or before an argument list with a comma; otherwise a product;
* ``\\sin 2x`` is ``sin(2x)`` (a number and the names glued to it), ``\\sin x y`` is rejected;
* ``*``, ``\\circ``, ``\\oplus`` … between operands are a problem's own operation, kept as an
  uninterpreted function (``x * y = y * x`` is not the truth value SymPy would give);
* ``\\parallel``, ``\\perp``, ``\\sim``, ``\\subset`` and membership in a named set or line
  are uninterpreted predicates; ``f: A \\to B`` is a map declaration; ``a : b`` is a ratio;
  ``:=`` is an equation; ``\\sum``/``\\prod`` bind their index (``a_i`` becomes
  ``Indexed``); ``\\{x \\mid …\\}`` is a ``ConditionSet``; ``a \\mid b`` is ``Mod(b, a) = 0``;
* ``[x]`` and ``\\{x\\}`` are read as integer and fractional part only when the problem
  says so in words (:func:`declared_notation`), otherwise rejected;
* unknown commands, ``\\pm``, words (``\\text{and}``, ``mod``, ``sin`` without a
  backslash), an ellipsis inside a number, imaginary values and infinity are rejected; an
  ellipsis inside a formula is an opaque atom of its own (``\\ldots_{1}``);
* chained relations are split into their links (``-1 \\leq x < 1`` →
  ``And(-1 <= x, x < 1)``);
* a structural check compares the Latin letters of the input with the letters of the
  parsed object's symbol and function names: a letter that vanished (``x - x + 1``,
  ``0 \\cdot y``) rejects the parse, so nothing the grammar misses can pass silently.

**Notation rule for point names** (decided for issue 13; applied by this parser and by the
checks of :mod:`recipematch.cas.relations`): a juxtaposed pair of point names (``AB``,
``PC``, ``A_1C_1``, ``B'C'``) is the unsigned length of the segment, symmetric in its
points: ``PC`` and ``CP`` are one unknown (:func:`segment_points`), which is the usual
reading in olympiad geometry. When the problem declares vectors or directed segments
(:func:`declared_notation` gives ``"directed_segments"``: ``\\vec``,
``\\overrightarrow``, "vector", "directed segment", "signed length" … in the corpus's
languages), the order of the points is kept and ``PC`` and ``CP`` are different unknowns.
Three or more points in a row (``ABC``, ``ABCD``) name one object (a triangle, an angle, a
polygon or its area) whose order is kept.

Symbols are named by their canonical LaTeX (``x_{1}``, ``\\alpha``, ``A'B'``,
``\\angle ABC``), so printing uses SymPy's LaTeX printer with ``symbol_names`` mapping a
symbol to its own name (:func:`to_latex`), and a rename is a token rewrite of that name.
"""

# long module: the LaTeX grammar is one recursive-descent parser whose rules call one another

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import sympy as sp
from sympy.core.function import AppliedUndef

from recipematch.cas.normalize import normalize_latex

__all__ = [
    "ParseError",
    "Parsed",
    "DEGREE",
    "CONSTANT_SYMBOLS",
    "parse_segment",
    "try_parse",
    "function_letters",
    "declared_notation",
    "to_latex",
    "latex_letters",
    "segment_points",
    "unsigned_segment_name",
    "REL_OPS",
]

#: The degree sign as a constant symbol (numeric value pi/180, never sampled or renamed).
DEGREE = sp.Symbol("^{\\circ}")
#: Symbols that are constants, not unknowns.
CONSTANT_SYMBOLS = frozenset({DEGREE})

#: Canonical relation operators and their SymPy classes.
REL_OPS: dict[str, type] = {
    "=": sp.Eq, "<": sp.StrictLessThan, "<=": sp.LessThan, ">": sp.StrictGreaterThan,
    ">=": sp.GreaterThan, "!=": sp.Ne,
}
_REL_TOKENS = {"=": "=", "<": "<", ">": ">", "leq": "<=", "geq": ">=", "neq": "!="}
_REL_TOKENS_STRICT = {"=": "=", "<": "<", ">": ">", "leq": "<=", "geq": ">=", "neq": "!="}
#: Geometric relations kept as uninterpreted predicates (structure only, never evaluated).
_PREDICATES = frozenset({"parallel", "perp", "sim", "cong", "subset", "subseteq", "supset", "supseteq",
                         "nparallel"})
_SET_OPS = frozenset({"cap", "cup", "setminus"})
_ARROWS = frozenset({"to", "rightarrow", "longrightarrow"})
_BIG_OPS = {"sum": sp.Sum, "prod": sp.Product}
#: Binary operations a problem defines itself (``a * b = a + b - ab``): uninterpreted
#: functions, never multiplication.
_CUSTOM_OPS = {"*": "*", "circ": "\\circ", "nabla": "\\nabla", "star": "\\star", "diamond": "\\diamond",
               "oplus": "\\oplus", "otimes": "\\otimes", "bullet": "\\bullet", "triangledown": "\\triangledown"}

_GREEK = frozenset("""alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota
kappa lambda mu nu xi omicron rho varrho sigma varsigma tau upsilon phi varphi chi psi omega
Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega ell""".split())
_FUNCS = {
    "sin": sp.sin, "cos": sp.cos, "tan": sp.tan, "cot": sp.cot, "sec": sp.sec, "csc": sp.csc,
    "arcsin": sp.asin, "arccos": sp.acos, "arctan": sp.atan, "sinh": sp.sinh, "cosh": sp.cosh,
    "tanh": sp.tanh, "ln": sp.log, "log": sp.log, "exp": sp.exp,
}
_MULTI_FUNCS = {"max": sp.Max, "min": sp.Min}
_OPAQUE_FUNCS = frozenset({"gcd", "lcm", "deg", "sgn", "arccot"})
_DECORATIONS = frozenset({"overline", "bar", "hat", "widehat", "tilde", "widetilde", "vec",
                          "overrightarrow", "mathcal", "mathbf", "mathfrak", "mathscr",
                          "boldsymbol", "dot", "check", "breve", "underline", "mathit"})
_NAME_PREFIX_CMDS = frozenset({"angle", "triangle", "odot"})
_ANGLE_HATS = frozenset({"hat", "widehat"})
_WORD_ARG_CMDS = frozenset({"operatorname", "text", "mathbb", "begin", "end", "textrm",
                            "textit", "textbf", "mbox", "hbox", "mathrm"})
_BAD_WORDS = ("sin", "cos", "tan", "cot", "log", "exp", "max", "min", "gcd", "lcm", "mod",
              "deg", "det", "lim", "sgn", "arg")
_REJECT_CMDS = {
    "pm": "\\pm stands for two expressions", "mp": "\\mp stands for two expressions",
    "vdots": "vertical ellipsis", "ddots": "diagonal ellipsis",
    "sum": "big operator (sum) needs an index", "prod": "big operator (product) needs an index",
    "int": "integral not supported", "lim": "limit not supported", "infty": "infinity is not a number",
    "mid": "divisibility needs a left side", "nmid": "divisibility needs a left side",
    "equiv": "congruence needs a left side", "pmod": "modulus without a congruence",
    "bmod": "modulus without a congruence", "mod": "modulus without a congruence", "to": "arrow/map not supported", "rightarrow": "arrow not supported",
    "mapsto": "map not supported", "circ": "composition or degree sign without a number",
    "parallel": "parallelism needs two sides", "perp": "perpendicularity needs two sides",
    "sim": "similarity needs two sides", "cong": "geometric congruence needs two sides",
    "approx": "approximation is not an equation", "cap": "set operation needs two sides",
    "cup": "set operation needs two sides",
    "setminus": "set operation",
    "cdot": "dangling operator",
    "text": "words inside a formula", "iff": "logical connective", "emptyset": "empty set",
    "partial": "derivative not supported", "nabla": "operator not supported",
    "binom": "binomial", "colon": "map declaration", "langle": "angle brackets",
}


class ParseError(ValueError):
    """Raised when a segment is outside the grammar; ``str(err)`` is the reason."""


@dataclass(frozen=True)
class Parsed:
    """A parsed segment.

    Attributes:
        kind: ``"relation"`` (one link), ``"chain"`` (≥ 2 links), ``"expression"``,
            ``"membership"`` (``x \\in S``), ``"set"``, ``"tuple"``, ``"divides"``
            (``a \\mid b`` as ``Mod(b, a) = 0``), ``"congruence"``, ``"predicate"`` (an
            uninterpreted geometric relation such as ``AB \\parallel CD`` or ``D \\in BC``)
            or ``"signature"`` (``f: A \\to B`` as ``Tuple(f, A, B)``).
        ops: canonical operators of the links (``"=", "<", "<=", ">", ">=", "!="``).
        sides: ``len(ops) + 1`` SymPy objects (one for an expression).
        obj: the SymPy object (``Relational``, ``And`` of links, ``Expr``, ``Contains`` …).
        letters: the Latin letters of the input (for the structural check and renames).
        flags: reading notes: ``log_base_ambiguous`` (``\\log`` without base),
            ``opaque_function`` (``\\gcd`` …, no numeric value), ``applied_function``,
            ``e_symbol``/``i_symbol`` (a bare ``e``/``i``, constant or unknown?), ``degree``.
    """

    kind: str
    ops: tuple[str, ...]
    sides: tuple[sp.Basic, ...]
    obj: sp.Basic
    letters: frozenset[str]
    flags: frozenset[str] = field(default_factory=frozenset)

    @property
    def is_relation(self) -> bool:
        """True for a relation or a chain of relations."""
        return self.kind in ("relation", "chain")

    @property
    def is_any_relation(self) -> bool:
        """Relations, chains, divisibility and congruences (the census's "relation")."""
        return self.kind in ("relation", "chain", "divides", "congruence", "predicate")

    @property
    def unknowns(self) -> frozenset[sp.Symbol]:
        """Free symbols that are unknowns (constant symbols such as the degree removed)."""
        return frozenset(s for s in self.obj.free_symbols
                         if isinstance(s, sp.Symbol) and s not in CONSTANT_SYMBOLS
                         and not s.name.startswith("\\ldots"))


@dataclass
class _Tok:
    kind: str  # num, let, cmd, op, eof
    value: str
    pos: int
    space: bool  # a blank precedes it
    arg: str | None = None  # brace argument of word commands (\text{..}, \mathbb{..})


_TOKEN_RE = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|([A-Za-z])|\\([A-Za-z]+)|\\(.)|(.))", re.S)


def _tokenize(s: str) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = 0, len(s)
    while i < n:
        m = _TOKEN_RE.match(s, i)
        if not m or m.end() == i:
            break
        num, let, cmd, esc, other = m.groups()
        whole = m.group(0)
        ws = len(whole) - len(whole.lstrip())
        pos = i + ws
        space = ws > 0
        i = m.end()
        if num is not None:
            toks.append(_Tok("num", num, pos, space))
        elif let is not None:
            toks.append(_Tok("let", let, pos, space))
        elif cmd is not None:
            tok = _Tok("cmd", cmd, pos, space)
            if cmd in _WORD_ARG_CMDS or cmd in _DECORATIONS:
                j = i
                while j < n and s[j] == " ":
                    j += 1
                if j < n and s[j] == "{":
                    depth, k = 0, j
                    while k < n:
                        if s[k] == "\\":
                            k += 2
                            continue
                        if s[k] == "{":
                            depth += 1
                        elif s[k] == "}":
                            depth -= 1
                            if depth == 0:
                                break
                        k += 1
                    tok.arg = s[j + 1:k]
                    i = k + 1
                elif cmd in _DECORATIONS and j < n and s[j].isalpha():
                    tok.arg = s[j]
                    i = j + 1
            toks.append(tok)
        elif esc is not None:
            if esc.isspace():
                continue
            toks.append(_Tok("cmd", esc, pos, space))
        else:
            if other.isspace():
                continue
            if other.isalpha():
                raise ParseError(f"non-Latin letter {other!r}")
            if other not in "+-*/^_()[]{}|!'=<>,.:;":
                raise ParseError(f"unexpected character {other!r}")
            toks.append(_Tok("op", other, pos, space))
    toks.append(_Tok("eof", "", n, True))
    return toks


#: Largest exact number the grammar lets a formula denote, in bits (about 30,000 decimal
#: digits): ``2^{2010}`` and ``2^{65536}`` are fine, ``9^{9^{9}}`` (370 million digits),
#: ``2^{2^{40}}``, ``10^{10^{10}}``, ``(10^{10})!`` or a product of ten million factors
#: are refused before anything builds them (SymPy would compute them in full as soon as
#: the number is multiplied, subtracted or compared).
MAX_NUMBER_BITS = 100_000
#: Most factors a ``\prod`` with numeric limits may have.
MAX_PRODUCT_FACTORS = 10_000


def _too_large(what: str, bits: float) -> ParseError:
    digits = f"{int(bits * 0.30103):,}" if bits < 1e300 else "astronomically many"
    return ParseError(f"number too large: {what} has about {digits} digits "
                      f"(limit {int(MAX_NUMBER_BITS * 0.30103):,})")


def _num_bits(e: sp.Basic) -> float:
    """An upper estimate of the size in bits of the exact value of a numeric expression
    (numerator and denominator), computed from its parts without evaluating it."""
    if e.is_Rational:
        return math.log2(max(abs(int(e.p)), int(e.q), 2))
    if e.is_Pow:
        b, x = e.args
        bb = _num_bits(b)
        if x.is_Rational:
            return bb * abs(int(x.p)) / int(x.q)
        xb = _num_bits(x)
        return math.inf if xb > 60 else bb * 2.0 ** xb
    if isinstance(e, sp.factorial) and e.args[0].is_Integer:
        return _factorial_bits(int(e.args[0]))
    if not e.args:
        return 2.0
    return sum(_num_bits(a) for a in e.args) + 1.0


def _short(e: sp.Basic) -> str:
    """A printable name for a number that may have thousands of digits."""
    bits = _num_bits(e) if e.is_number else 0.0
    if bits > 200:
        return f"(a {int(bits * 0.30103):,}-digit number)" if bits < 1e300 else "(an astronomically large number)"
    return sp.sstr(e) if e.is_Integer and e >= 0 else f"({sp.sstr(e)})"


def _safe_pow(base: sp.Expr, exp: sp.Expr) -> sp.Expr:
    """``Pow`` that refuses 0 to a negative power and numeric powers above
    :data:`MAX_NUMBER_BITS`, and keeps large ones unevaluated."""
    if base.is_zero and exp.is_number and (exp.is_negative or exp.is_zero is False and exp.is_real is False):
        raise ParseError("division by zero")
    if base.is_number and exp.is_number and not (base.is_Rational and abs(base) <= 1 and base.is_Integer):
        # the evaluated power (SymPy also combines (a^b)^c and (k a^b)^c) has about
        # bits(base) * |exp| bits
        size = _num_bits(sp.Pow(base, exp, evaluate=False))
        if size > MAX_NUMBER_BITS:
            raise _too_large(f"{_short(base)}^{_short(exp)}", size)
    if base.is_Number and exp.is_Number:
        try:
            b_bits = max(1, int(abs(sp.Rational(base).p)).bit_length()) if base.is_Rational else 64
        except (TypeError, ValueError):
            b_bits = 64
        e_val = abs(exp) if exp.is_Rational else sp.Integer(1)
        if (exp.is_Integer and int(e_val) * b_bits > 1000) or (not exp.is_Integer and b_bits > 200):
            return sp.Pow(base, exp, evaluate=False)
    return sp.Pow(base, exp)


def _factorial_bits(n: int) -> float:
    """log2(n!) (Stirling; exact enough for a size bound)."""
    if n < 2:
        return 0.0
    return (n * math.log(n) - n + 0.5 * math.log(2 * math.pi * n)) / math.log(2)


def _heavy(e: sp.Basic) -> bool:
    """A node SymPy would compute in full if the relation were evaluated: an unevaluated
    numeric power, factorial or binomial, or a sum/product."""
    if isinstance(e, (sp.Sum, sp.Product)):
        return True
    if e.is_Pow and e.base.is_Number and e.exp.is_Number:
        return True
    return isinstance(e, (sp.factorial, sp.binomial)) and all(a.is_Integer for a in e.args)


def _canonical_tokens(toks: list[_Tok]) -> str:
    """Canonical text of a run of simple tokens (names and subscripts)."""
    out: list[str] = []
    for k, t in enumerate(toks):
        if t.kind == "cmd":
            txt = "\\" + t.value
            if t.arg is not None:
                txt += "{" + t.arg.strip() + "}"
            nxt = toks[k + 1] if k + 1 < len(toks) else None
            if t.arg is None and nxt is not None and nxt.kind in ("let", "num") and t.value.isalpha():
                txt += " "
            out.append(txt)
        else:
            out.append(t.value)
    return "".join(out)


class _Parser:
    def __init__(self, toks: list[_Tok], functions: frozenset[str], strict: bool,
                 notation: frozenset[str] = frozenset()):
        self.toks = toks
        self.notation = notation
        self.i = 0
        self.functions = functions
        self.strict = strict
        self.abs_depth = 0
        self.flags: set[str] = set()
        self.name_letters: set[str] = set()
        self.n_ellipsis = 0
        self.last_had_addop = False
        self.exempt_letters: set[str] = set()
        self.bound: list[str] = []  # index letters of enclosing sums and products
        self.bound_used: set[str] = set()  # letters naming a set (\\mathbf{R})

    # ----------------------------------------------------------------- helpers
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def advance(self) -> _Tok:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def is_op(self, v: str, t: _Tok | None = None) -> bool:
        t = t or self.tok
        return t.kind == "op" and t.value == v

    def is_cmd(self, v: str, t: _Tok | None = None) -> bool:
        t = t or self.tok
        return t.kind == "cmd" and t.value == v

    def expect_op(self, v: str) -> None:
        if not self.is_op(v):
            raise ParseError(f"expected {v!r} at {self.describe(self.tok)}")
        self.advance()

    @staticmethod
    def describe(t: _Tok) -> str:
        if t.kind == "eof":
            return "end of formula"
        return ("\\" if t.kind == "cmd" else "") + t.value

    def relop(self) -> str | None:
        t = self.tok
        table = _REL_TOKENS_STRICT if self.strict else _REL_TOKENS
        if t.kind == "op" and t.value in ("=", "<", ">"):
            return table[t.value]
        if t.kind == "cmd" and t.value in table:
            return table[t.value]
        if t.kind == "cmd" and t.value in ("in", "notin", "mid", "nmid", "equiv"):
            return t.value
        if t.kind == "cmd" and t.value in _PREDICATES:
            return t.value
        if t.kind == "op" and t.value == ":" and self.is_op("=", self.peek()):
            return ":="
        return None

    def fail_here(self) -> None:
        """Raise the most specific reason for the current token."""
        t = self.tok
        if t.kind == "cmd":
            if t.value in _REJECT_CMDS:
                raise ParseError(_REJECT_CMDS[t.value])
            known = (t.value in _GREEK or t.value in _FUNCS or t.value in _MULTI_FUNCS or t.value in _OPAQUE_FUNCS
                     or t.value in _DECORATIONS or t.value in _NAME_PREFIX_CMDS or t.value in _REL_TOKENS
                     or t.value in ("frac", "sqrt", "binom", "pi", "lfloor", "lceil", "rfloor", "rceil", "cdot",
                                    "times", "div", "ldots", "in", "notin", "mathbb", "{", "}", "%"))
            if not known:
                raise ParseError(f"unknown command \\{t.value}")
        raise ParseError(f"unexpected {self.describe(t)}")

    # ----------------------------------------------------------------- grammar
    def segment(self) -> tuple[str, list[str], list[sp.Basic]]:
        if self.tok.kind == "eof":
            raise ParseError("empty formula")
        sig = self.signature()
        if sig is not None:
            return "signature", [], [sig]
        first = self.side()
        sides = [first]
        ops: list[str] = []
        while True:
            op = self.relop()
            if op is None:
                break
            self.advance()
            if op == ":=":
                self.advance()  # the "=" of ":=": a definition is an equation
                op = "="
            if op in _PREDICATES:
                if ops:
                    raise ParseError("geometric relation inside a chain")
                sides.append(self.side())
                if self.tok.kind != "eof":
                    self.fail_here()
                self.flags.add("uninterpreted")
                return "predicate", [op], sides
            if op in ("in", "notin"):
                if ops:
                    raise ParseError("membership inside a chain")
                line = (self.is_op("(") and self.peek().kind == "let" and self.peek().value.isupper()
                        and self.is_op(")", self.peek(2)) and self.peek(3).kind == "eof")
                line = line or (self.is_op("(") and self.peek().kind == "let" and self.peek().value.isupper()
                                and self._paren_is_name_run())
                if line:
                    self.advance()
                    name = self.uppercase_run()
                    self.expect_op(")")
                    if self.tok.kind != "eof":
                        self.fail_here()
                    self.flags.add("uninterpreted")
                    return "predicate", [op], [sides[0], sp.Symbol("(" + name + ")")]
                if self.tok.kind == "let" and not self.is_op("(", self.peek()):
                    # membership in a named set or a line (k \in S, D \in BC): a predicate
                    sides.append(self.side())
                    if self.tok.kind != "eof":
                        self.fail_here()
                    self.flags.add("uninterpreted")
                    return "predicate", [op], sides
                sides.append(self.set_expr())
                ops.append(op)
                if self.tok.kind != "eof":
                    raise ParseError(f"unexpected {self.describe(self.tok)} after a set")
                return "membership", ops, sides
            if op in ("mid", "nmid", "equiv"):
                if ops:
                    raise ParseError("divisibility or congruence inside a chain")
                sides.append(self.expr())
                ops.append(op)
                if op == "equiv":
                    sides.append(self.modulus())
                    kind = "congruence"
                else:
                    kind = "divides"
                if self.tok.kind != "eof":
                    raise ParseError(f"unexpected {self.describe(self.tok)}")
                return kind, ops, sides
            ops.append(op)
            sides.append(self.side())
            if (op == "=" and len(ops) == 1 and self.is_op(",") and isinstance(first, sp.Symbol)
                    and first.name in ("i", "j", "k", "m", "n") and sides[1].is_Integer):
                # "n = 1,2": an index letter is an integer, so the comma lists its values
                values = [sides[1]]
                while self.is_op(","):
                    self.advance()
                    v = self.expr()
                    if not v.is_Integer:
                        raise ParseError("value list of an index with a non-integer")
                    values.append(v)
                if self.tok.kind != "eof":
                    self.fail_here()
                return "membership", ["in"], [first, sp.FiniteSet(*values)]
        if self.tok.kind != "eof":
            self.fail_here()
        if not ops:
            kind = "tuple" if isinstance(first, sp.Tuple) else ("set" if isinstance(first, sp.Set) else "expression")
            return kind, ops, sides
        return ("relation" if len(ops) == 1 else "chain"), ops, sides

    def side(self) -> sp.Basic:
        """One side of a relation: an expression, a two-term ratio ``a : b`` (read a/b), or
        names joined by set operations (``AB \\cap CD``, uninterpreted)."""
        e = self.expr_or_tuple()
        if self.is_op(":") and not self.is_op("=", self.peek()):
            self.advance()
            d = self.expr()
            if self.is_op(":"):
                raise ParseError("ratio of more than two terms")
            if not isinstance(e, sp.Expr) or not isinstance(d, sp.Expr) or d.is_zero:
                raise ParseError("ratio of non-numbers or by zero")
            self.flags.add("ratio")
            e = sp.Mul(e, _safe_pow(d, sp.Integer(-1)))
        while self.tok.kind == "cmd" and self.tok.value in _SET_OPS:
            op = self.advance().value
            rhs = self.expr_or_tuple()
            self.flags.add("uninterpreted")
            e = sp.Function("\\" + op)(e, rhs)
        return e

    def signature(self) -> sp.Basic | None:
        """``f: A \\to B`` (a map declaration) as ``Tuple(f, A, B)``, or None."""
        j = self.i
        t = self.toks[j]
        if t.kind != "let":
            return None
        k = j + 1
        if self.toks[k].kind == "op" and self.toks[k].value == "_":
            return None
        colon = self.toks[k]
        if not ((colon.kind == "op" and colon.value == ":") or (colon.kind == "cmd" and colon.value == "colon")):
            return None
        if self.toks[k + 1].kind == "op" and self.toks[k + 1].value == "=":
            return None
        self.i = k + 1
        name = t.value
        self.name_letters.add(name)
        a = self.any_set()
        if not (self.tok.kind == "cmd" and self.tok.value in _ARROWS):
            raise ParseError("map declaration without an arrow")
        self.advance()
        b = self.any_set()
        if self.tok.kind != "eof":
            self.fail_here()
        self.flags.add("uninterpreted")
        return sp.Tuple(sp.Symbol(name), a, b)

    def any_set(self) -> sp.Basic:
        if self.tok.kind == "let" and self.tok.value.isupper():
            return sp.Symbol(self.name_unit())
        return self.set_expr()

    def expr_or_tuple(self) -> sp.Basic:
        if self.is_cmd("{"):
            s = self.set_literal()
            return s
        if self.is_cmd("mathbb"):
            return self.set_expr()
        return self.op_expr()

    def modulus(self) -> sp.Expr:
        """``\\pmod{n}``, ``\\pmod n``, ``(\\bmod n)``, ``(\\mod n)``, ``\\mod n``."""
        paren = False
        if self.is_op("(") and self.peek().kind == "cmd" and self.peek().value in ("mod", "bmod"):
            self.advance()
            paren = True
        if not (self.tok.kind == "cmd" and self.tok.value in ("pmod", "mod", "bmod")):
            raise ParseError("congruence without a modulus")
        self.advance()
        n = self.brace_arg() if self.is_op("{") else self.power()
        if paren:
            self.expect_op(")")
        return n

    def custom_op(self) -> str | None:
        t = self.tok
        if t.kind == "op" and t.value == "*":
            return "*"
        if t.kind == "cmd" and t.value in _CUSTOM_OPS and t.value != "*":
            if t.value == "circ" and self.is_op("^", self.toks[self.i - 1]):
                return None
            return _CUSTOM_OPS[t.value]
        return None

    def op_expr(self) -> sp.Basic:
        """An expression, possibly joined by a problem's own binary operation
        (``x * (y * z)``), kept as an uninterpreted function; mixing it with an unbracketed
        ``+``/``-`` is ambiguous and rejected."""
        e = self.expr()
        plain = not self.last_had_addop
        while self.custom_op() is not None:
            name = self.custom_op()
            self.advance()
            rhs = self.expr()
            if not (plain and not self.last_had_addop):
                raise ParseError(f"operation {name} next to an unbracketed + or -")
            self.flags.add("uninterpreted")
            e = sp.Function(name)(e, rhs)
            plain = True
        return e

    def expr(self) -> sp.Expr:
        terms: list[sp.Expr] = []
        sign = 1
        self.last_had_addop = False
        if self.is_op("+"):
            self.advance()
        elif self.is_op("-"):
            self.advance()
            sign = -1
        t = self.term()
        terms.append(-t if sign < 0 else t)
        while True:
            if self.is_op("+"):
                self.advance()
                terms.append(self.term())
            elif self.is_op("-"):
                self.advance()
                terms.append(-self.term())
            elif self.tok.kind == "cmd" and self.tok.value in ("pm", "mp"):
                raise ParseError(_REJECT_CMDS[self.tok.value])
            else:
                break
        if len(terms) > 1 and any(isinstance(t, sp.Tuple) for t in terms):
            raise ParseError("a tuple inside a sum")
        self.last_had_addop = len(terms) > 1 or sign < 0
        if len(terms) == 1:
            return terms[0]
        return sp.Add(*terms)

    def starts_factor(self, t: _Tok) -> bool:
        if t.kind in ("let", "num"):
            return True
        if t.kind == "op":
            if t.value == "|":
                return self.abs_depth == 0
            return t.value in "({["
        if t.kind == "cmd":
            v = t.value
            return (v in ("frac", "sqrt", "binom", "pi", "lfloor", "lceil", "{", "operatorname", "ldots")
                    or v in _GREEK or v in _FUNCS or v in _MULTI_FUNCS or v in _OPAQUE_FUNCS
                    or v in _DECORATIONS or v in _NAME_PREFIX_CMDS or v in _REJECT_CMDS
                    and v not in ("cdot", "pm", "mp", "mid", "nmid", "equiv", "to", "rightarrow",
                                  "parallel", "perp", "sim", "cong", "approx", "cap", "cup",
                                  "setminus", "subset", "subseteq", "supset", "iff", "colon", "mapsto",
                                  "pmod", "bmod", "mod", "circ"))
        return False

    def term(self) -> sp.Expr:
        factors = [self.unary()]
        after_div = False
        while True:
            t = self.tok
            if self.is_cmd("cdot", t) or self.is_cmd("times", t):
                self.advance()
                factors.append(self.unary())
                after_div = False
            elif self.is_op("/", t) or self.is_cmd("div", t):
                self.advance()
                d = self.unary()
                if d.is_zero:
                    raise ParseError("division by zero")
                factors.append(_safe_pow(d, sp.Integer(-1)))
                after_div = True
            elif self.starts_factor(t):
                if after_div:
                    raise ParseError("product after '/' is ambiguous (a/bc)")
                if t.kind == "num":
                    raise ParseError(f"number {t.value} right after a factor needs an explicit operator")
                factors.append(self.power())
            else:
                break
        if len(factors) > 1 and any(isinstance(f, sp.Tuple) for f in factors):
            raise ParseError("a tuple inside a product")
        if len(factors) == 1:
            return factors[0]
        return sp.Mul(*factors)

    def unary(self) -> sp.Expr:
        if self.is_op("-"):
            self.advance()
            return -self.power()
        if self.is_op("+"):
            self.advance()
        return self.power()

    def power(self) -> sp.Expr:
        base = self.postfix()
        if self.is_op("^"):
            self.advance()
            e = self.script(sup=True)
            if e is DEGREE:
                self.flags.add("degree")
                res = sp.Mul(base, DEGREE)
            else:
                res = _safe_pow(base, e)
            if self.is_op("^"):
                raise ParseError("double superscript")
            if self.is_op("_"):
                raise ParseError("subscript after a superscript")
            if self.is_op("!"):
                raise ParseError("factorial after a power is ambiguous")
            return res
        return base

    def postfix(self) -> sp.Expr:
        p = self.primary()
        while self.is_op("!") or self.is_cmd("%"):
            if self.is_cmd("%"):
                self.advance()
                p = sp.Mul(p, sp.Rational(1, 100))
                continue
            self.advance()
            if self.is_op("!"):
                raise ParseError("double factorial not supported")
            if p.is_Integer and _factorial_bits(int(p)) > MAX_NUMBER_BITS:
                raise _too_large(f"{p}!", _factorial_bits(int(p)))
            if p.is_Integer and p > 150:
                p = sp.factorial(p, evaluate=False)
            elif p.is_Integer and p < 0:
                raise ParseError("factorial of a negative integer")
            else:
                p = sp.factorial(p)
        if self.is_op("_"):
            raise ParseError("subscript on a group or number")
        if self.is_op("'"):
            raise ParseError("prime on a group or number")
        return p

    def script(self, sup: bool) -> sp.Expr:
        """A superscript: one token or a brace group."""
        t = self.tok
        if self.is_op("{", t):
            self.advance()
            if self.is_cmd("circ"):
                self.advance()
                self.expect_op("}")
                return DEGREE
            if self.is_op("(") and self._paren_group_is_whole_script():
                raise ParseError("parenthesised superscript (an index?)")
            e = self.expr()
            self.expect_op("}")
            return e
        if t.kind == "num":
            if len(t.value) > 1:
                raise ParseError(f"ambiguous superscript ^{t.value}: TeX reads only its first digit")
            self.advance()
            return sp.Integer(t.value)
        if t.kind == "let":
            self.advance()
            self.name_letters.add(t.value)
            return sp.Symbol(t.value)
        if t.kind == "cmd" and t.value in _GREEK:
            self.advance()
            return sp.Symbol("\\" + t.value)
        if t.kind == "cmd" and t.value == "pi":
            self.advance()
            return sp.pi
        if t.kind == "cmd" and t.value == "circ":
            self.advance()
            return DEGREE
        raise ParseError(f"unsupported superscript {self.describe(t)}")

    def _paren_group_is_whole_script(self) -> bool:
        depth = 0
        j = self.i
        while j < len(self.toks):
            t = self.toks[j]
            if t.kind == "op" and t.value == "(":
                depth += 1
            elif t.kind == "op" and t.value == ")":
                depth -= 1
                if depth == 0:
                    nxt = self.toks[j + 1]
                    return nxt.kind == "op" and nxt.value == "}"
            elif t.kind == "eof":
                return False
            j += 1
        return False

    # ----------------------------------------------------------------- names
    def subscript_text(self) -> str:
        """Canonical text of a subscript (after ``_``)."""
        t = self.tok
        if self.is_op("{", t):
            self.advance()
            start = self.i
            depth = 1
            while True:
                u = self.tok
                if u.kind == "eof":
                    raise ParseError("unclosed subscript")
                if self.is_op("{", u):
                    depth += 1
                elif self.is_op("}", u):
                    depth -= 1
                    if depth == 0:
                        break
                if u.kind == "cmd" and u.value not in _GREEK and u.value not in (
                        "cdot", "prime", "pi", "ldots", "max", "min"):
                    raise ParseError(f"unsupported command in a subscript: \\{u.value}")
                if u.kind == "let":
                    self.name_letters.add(u.value)
                self.advance()
            inner = self.toks[start:self.i]
            self.advance()
            if not inner:
                raise ParseError("empty subscript")
            return _canonical_tokens(inner)
        if t.kind == "num":
            if len(t.value) > 1:
                raise ParseError(f"ambiguous subscript _{t.value}: TeX reads only its first digit")
            self.advance()
            return t.value
        if t.kind == "let":
            self.name_letters.add(t.value)
            self.advance()
            return t.value
        if t.kind == "cmd" and t.value in _GREEK:
            self.advance()
            return "\\" + t.value
        raise ParseError(f"unsupported subscript {self.describe(t)}")

    def name_unit(self) -> str:
        """A letter or Greek command with its primes and subscript, as canonical LaTeX."""
        t = self.advance()
        if t.kind == "let":
            name = t.value
            self.name_letters.add(t.value)
        else:
            name = "\\" + t.value
        while self.is_op("'"):
            self.advance()
            name += "'"
        if self.is_op("_"):
            self.advance()
            name += "_{" + self.subscript_text() + "}"
            while self.is_op("'"):
                self.advance()
                name += "'"
        return name

    def make_symbol(self, name: str) -> sp.Expr:
        """A symbol, or ``Indexed(base, index)`` when its subscript mentions the index of an
        enclosing sum or product (``a_i`` inside ``\\sum_{i=1}^{n}``)."""
        if self.bound and name.count("_{") == 1 and name.endswith("}"):
            base, _, sub = name.partition("_{")
            sub = sub[:-1]
            used = set(re.sub(r"\\\\[A-Za-z]+", " ", sub)) & set(self.bound)
            if used:
                p = parse_segment(sub)
                if p.kind == "expression":
                    idx = [p.obj]
                elif p.kind == "tuple":
                    idx = list(p.obj)
                else:
                    raise ParseError("unsupported index")
                self.bound_used |= used
                return sp.Indexed(sp.IndexedBase(sp.Symbol(base)), *idx)
        return sp.Symbol(name)

    def _capital_continues_run(self) -> bool:
        """The current token is a capital letter that continues a run of point names:
        glued or after a blank (TeX ignores the blank), unless a blank separates it and it
        is a function call (``A F(x)``)."""
        t = self.tok
        if not (t.kind == "let" and t.value.isupper()):
            return False
        return not (t.space and t.value in self.functions and self.is_op("(", self.peek()))

    def _glued_hat(self) -> bool:
        t = self.tok
        return (t.kind == "cmd" and t.value in _ANGLE_HATS and not t.space and (t.arg or "").strip().isupper()
                and len((t.arg or "").strip()) == 1)

    def uppercase_run(self) -> str:
        """Point names (a capital letter with its primes and subscript) in a row name one
        geometric object, whatever the blanks between them (TeX ignores them, so ``A
        P_{1}``, ``AP_1`` and ``A P_1`` are the same name ``AP_{1}``, and ``AB CD`` is
        ``ABCD``). Two points name a segment length (see :data:`NOTATION_RULE`)."""
        units = [self.name_unit()]
        if self._glued_hat():
            hat = self.command()
            return units[0] + hat.name
        while self._capital_continues_run():
            units.append(self.name_unit())
        return "".join(units)

    def check_word(self) -> None:
        j = self.i
        run = ""
        while self.toks[j].kind == "let" and self.toks[j].value.islower() and (j == self.i or not self.toks[j].space):
            run += self.toks[j].value
            j += 1
        if len(run) >= 2:
            for w in _BAD_WORDS:
                if w in run:
                    raise ParseError(f"function name {w!r} written without a backslash")
            if run.startswith("ln"):
                raise ParseError("function name 'ln' written without a backslash")

    # ----------------------------------------------------------------- primaries
    def primary(self) -> sp.Expr:
        t = self.tok
        if t.kind == "num":
            self.advance()
            if self.is_cmd("frac") and self._frac_is_numeric():
                raise ParseError("a number followed by a numeric fraction is an ambiguous mixed number")
            if "." in t.value:
                return sp.Rational(t.value)
            return sp.Integer(t.value)
        if t.kind == "let":
            return self.letter()
        if t.kind == "op":
            if t.value == "(":
                return self.paren()
            if t.value == "{":
                self.advance()
                if self.is_op("}"):
                    raise ParseError("empty group")
                e = self.expr()
                self.expect_op("}")
                return e
            if t.value == "|":
                self.advance()
                self.abs_depth += 1
                e = self.expr()
                self.abs_depth -= 1
                self.expect_op("|")
                return sp.Abs(e)
            if t.value == "[":
                if "integer_part" in self.notation:
                    self.advance()
                    saved = self.abs_depth
                    self.abs_depth = 0
                    e = self.expr()
                    self.abs_depth = saved
                    self.expect_op("]")
                    return sp.floor(e)
                raise ParseError("square brackets are ambiguous (integer part, area or grouping)")
            raise ParseError(f"unexpected {self.describe(t)}")
        if t.kind == "cmd":
            return self.command()
        raise ParseError("unexpected end of formula")

    def _frac_is_numeric(self) -> bool:
        # \frac { num } { num }
        k = self.i
        want = ["cmd", "{", "num", "}", "{", "num", "}"]
        for w in want:
            u = self.toks[k]
            if w == "cmd":
                pass
            elif w == "num":
                if u.kind != "num":
                    return False
            elif not (u.kind == "op" and u.value == w):
                return False
            k += 1
        return True

    def letter(self) -> sp.Expr:
        t = self.tok
        if t.value.islower():
            self.check_word()
        nxt = self.peek()
        if t.value in self.functions and (self.is_op("(", nxt) or (self.is_op("'", nxt))
                                          or (self.is_op("{", nxt) and self.is_op("(", self.peek(2)))):
            return self.applied_function()
        if t.value.isupper() and ((nxt.kind == "let" and nxt.value.isupper())
                                  or (nxt.kind == "cmd" and nxt.value in _ANGLE_HATS and not nxt.space)):
            name = self.uppercase_run()
        elif t.value.isupper() and nxt.kind == "op" and nxt.value in ("_", "'"):
            # A_1B_1 or A'B': a run continues after the first unit
            name = self.uppercase_run()
        else:
            name = self.name_unit()
        if self.is_op("(") and (self._paren_has_top_comma() or (t.value in self.functions and name != t.value)):
            # a name before an argument list: N(a, b), f_k(x), c(O, R) (a product with a
            # tuple means nothing, so this reading is the only one)
            args = self.call_args()
            self.flags.add("applied_function")
            return sp.Function(name)(*args)
        if name == "e":
            self.flags.add("e_symbol")
        if name == "i" and "i" not in self.bound:
            self.flags.add("i_symbol")
        return self.make_symbol(name)

    def applied_function(self) -> sp.Expr:
        t = self.advance()
        self.name_letters.add(t.value)
        name = t.value
        while self.is_op("'"):
            self.advance()
            name += "'"
        braced = False
        if self.is_op("{"):
            self.advance()
            braced = True
        if not self.is_op("("):
            raise ParseError(f"function {name} without an argument list")
        args = self.call_args()
        if braced:
            self.expect_op("}")
        self.flags.add("applied_function")
        return sp.Function(name)(*args)

    def _brace_set_has_comma(self) -> bool:
        depth = 0
        for u in self.toks[self.i:]:
            if u.kind == "cmd" and u.value == "{":
                depth += 1
            elif u.kind == "cmd" and u.value == "}":
                depth -= 1
                if depth == 0:
                    return False
            elif u.kind == "op" and u.value == "," and depth == 1:
                return True
            elif u.kind == "eof":
                return False
        return False

    def _paren_is_name_run(self) -> bool:
        j = self.i + 1
        while self.toks[j].kind == "let" and self.toks[j].value.isupper():
            j += 1
        return self.toks[j].kind == "op" and self.toks[j].value == ")" and self.toks[j + 1].kind == "eof"

    def _paren_has_top_comma(self) -> bool:
        depth = 0
        j = self.i
        while j < len(self.toks):
            u = self.toks[j]
            if u.kind == "op" and u.value in "([{":
                depth += 1
            elif u.kind == "op" and u.value in ")]}":
                depth -= 1
                if depth == 0:
                    return False
            elif u.kind == "op" and u.value == "," and depth == 1:
                return True
            elif u.kind == "eof":
                return False
            j += 1
        return False

    def call_args(self) -> list[sp.Expr]:
        self.expect_op("(")
        args = [self.expr()]
        while self.is_op(","):
            self.advance()
            args.append(self.expr())
        self.expect_op(")")
        return args

    def paren(self) -> sp.Basic:
        self.expect_op("(")
        saved = self.abs_depth
        self.abs_depth = 0
        e = self.op_expr()
        if self.is_op(",") or self.is_op(";"):
            sep = self.tok.value
            items = [e]
            while self.is_op(sep):
                self.advance()
                items.append(self.expr())
            self.expect_op(")")
            self.abs_depth = saved
            if self.tok.kind != "eof" and self.relop() is None:
                raise ParseError("a tuple inside an expression")
            return sp.Tuple(*items)
        self.expect_op(")")
        self.abs_depth = saved
        return e

    def brace_arg(self) -> sp.Expr:
        if not self.is_op("{"):
            raise ParseError(f"expected a brace argument at {self.describe(self.tok)}")
        self.advance()
        e = self.expr()
        self.expect_op("}")
        return e

    def command(self) -> sp.Expr:
        t = self.tok
        v = t.value
        if v == "frac":
            self.advance()
            num = self.brace_arg()
            den = self.brace_arg()
            if den.is_zero:
                raise ParseError("division by zero")
            return sp.Mul(num, _safe_pow(den, sp.Integer(-1)))
        if v == "sqrt":
            self.advance()
            n = None
            if self.is_op("["):
                self.advance()
                n = self.expr()
                self.expect_op("]")
                if not (n.is_Integer and n >= 2):
                    raise ParseError("root index must be an integer >= 2")
            arg = self.brace_arg()
            return sp.sqrt(arg) if n is None else _safe_pow(arg, sp.Rational(1, int(n)))
        if v == "binom":
            self.advance()
            a = self.brace_arg()
            b = self.brace_arg()
            if a.is_Integer and b.is_Integer and 0 <= b <= a:
                n_, k_ = int(a), min(int(b), int(a) - int(b))
                bits = _factorial_bits(n_) - _factorial_bits(k_) - _factorial_bits(n_ - k_)
                if bits > MAX_NUMBER_BITS:
                    raise _too_large(f"binomial({a}, {b})", bits)
            if a.is_Integer and a > 300:
                return sp.binomial(a, b, evaluate=False)
            return sp.binomial(a, b)
        if v == "pi":
            self.advance()
            return sp.pi
        if v in _GREEK:
            if self.peek().kind == "op" and self.peek().value == "(" and ("\\" + v) in self.functions:
                raise ParseError("Greek function application not supported")
            return self.make_symbol(self.name_unit())
        if v in _BIG_OPS:
            return self.big_operator(v)
        if v in _FUNCS:
            return self.function_command()
        if v in _MULTI_FUNCS:
            self.advance()
            if self.is_op("{") and self.is_op("(", self.peek()):
                self.advance()
                args = self.call_args()
                self.expect_op("}")
            elif self.is_cmd("{"):
                self.advance()
                args = [self.expr()]
                while self.is_op(","):
                    self.advance()
                    args.append(self.expr())
                if not self.is_cmd("}"):
                    raise ParseError("expected \\}")
                self.advance()
            else:
                args = self.call_args()
            if len(args) < 2:
                raise ParseError(f"\\{v} needs at least two arguments")
            return _MULTI_FUNCS[v](*args)
        if v in _OPAQUE_FUNCS or v == "operatorname":
            name = v if v != "operatorname" else (t.arg or "").strip()
            if name not in _OPAQUE_FUNCS:
                raise ParseError(f"unknown operator {name!r}")
            self.advance()
            if self.is_op("{") and self.is_op("(", self.peek()):
                self.advance()
                args = self.call_args()
                self.expect_op("}")
            else:
                args = self.call_args()
            self.flags.add("opaque_function")
            return sp.Function(name)(*args)
        if v in ("lfloor", "lceil"):
            self.advance()
            e = self.expr()
            close = "rfloor" if v == "lfloor" else "rceil"
            if not self.is_cmd(close):
                raise ParseError(f"expected \\{close}")
            self.advance()
            return sp.floor(e) if v == "lfloor" else sp.ceiling(e)
        if v in _NAME_PREFIX_CMDS:
            self.advance()
            units: list[str] = []
            paren = v == "odot" and self.is_op("(")
            if paren:
                self.advance()
            while self.tok.kind == "let" and self.tok.value.isupper():
                units.append(self.name_unit())
            if paren:
                self.expect_op(")")
            if not units:
                raise ParseError(f"\\{v} without a point name")
            return sp.Symbol("\\" + v + " " + "".join(units))
        if v in _DECORATIONS:
            body = (t.arg or "").strip()
            if not re.fullmatch(r"(?:[A-Z]'*(?:_\{?[0-9A-Za-z]\}?)?'*)+|[a-z]", body):
                raise ParseError(f"\\{v}{{{body}}} is not a plain name")
            if v in ("overline", "underline") and body.islower():
                raise ParseError("overline of lowercase letters reads as digits of a number")
            self.advance()
            for ch in body:
                if ch.isalpha():
                    self.name_letters.add(ch)
            body_tokens = _tokenize(body)[:-1]
            name = "\\" + v + "{" + _canonical_tokens(body_tokens) + "}"
            while self.is_op("'"):
                self.advance()
                name += "'"
            if self.is_op("_"):
                self.advance()
                name += "_{" + self.subscript_text() + "}"
            if v in _ANGLE_HATS and body.isupper():
                # B\\hat{A}C, \\hat{A}BP: a hat glued to capitals names an angle
                while self.tok.kind == "let" and self.tok.value.isupper() and not self.tok.space:
                    name += self.name_unit()
            return sp.Symbol(name)
        if v == "ldots":
            self.advance()
            self.flags.add("ellipsis")
            self.n_ellipsis += 1
            return sp.Symbol("\\ldots_{" + str(self.n_ellipsis) + "}")
        if v == "{":
            if "fractional_part" in self.notation and not self._brace_set_has_comma():
                self.advance()
                e = self.expr()
                if not self.is_cmd("}"):
                    raise ParseError("expected \\}")
                self.advance()
                return sp.frac(e)
            raise ParseError("\\{x\\} is ambiguous (fractional part or set)")
        if v in _REJECT_CMDS:
            raise ParseError(_REJECT_CMDS[v])
        if v in ("leq", "geq", "neq", "in", "notin"):
            raise ParseError(f"relation \\{v} without a left side")
        raise ParseError(f"unknown command \\{v}")

    def big_operator(self, v: str) -> sp.Expr:
        """``\\sum_{i=a}^{b} body`` / ``\\prod``: the body is one product of factors (the
        usual reading: the operator binds to the next term)."""
        self.advance()
        if not self.is_op("_"):
            raise ParseError(f"\\{v} without an index")
        self.advance()
        self.expect_op("{")
        var_tok = self.tok
        if var_tok.kind != "let" or not self.is_op("=", self.peek()):
            raise ParseError(f"\\{v} over a condition (only index = lower bound)")
        self.advance()
        self.advance()
        lower = self.expr()
        self.expect_op("}")
        if not self.is_op("^"):
            raise ParseError(f"\\{v} without an upper limit")
        self.advance()
        if self.is_cmd("infty") or (self.is_op("{") and self.is_cmd("infty", self.peek())
                                    and self.is_op("}", self.peek(2))):
            braced = self.is_op("{")
            self.advance()
            if braced:
                self.advance()
                self.advance()
            upper = sp.oo
        else:
            upper = self.script(sup=True)
        self.bound.append(var_tok.value)
        try:
            body = self.term()
        finally:
            self.bound.pop()
        self.bound_used.add(var_tok.value)
        self.flags.add("big_operator")
        if v == "prod" and lower.is_Integer and upper.is_Integer and int(upper) - int(lower) + 1 > MAX_PRODUCT_FACTORS:
            raise ParseError(f"product of {int(upper) - int(lower) + 1:,} factors "
                             f"(limit {MAX_PRODUCT_FACTORS:,}): its value is too large")
        return _BIG_OPS[v](body, (sp.Symbol(var_tok.value), lower, upper))

    def function_command(self) -> sp.Expr:
        v = self.advance().value
        fn = _FUNCS[v]
        power = None
        base = None
        if v == "log" and self.is_op("_"):
            self.advance()
            base = self.script(sup=False)
        if self.is_op("^"):
            self.advance()
            power = self.script(sup=True)
            if not (power.is_Integer and power > 0):
                raise ParseError(f"\\{v}^{{{power}}}: only positive integer powers of a function")
        if v == "log" and base is None:
            self.flags.add("log_base_ambiguous")
        if self.is_op("(") or (self.is_op("{") and self.is_op("(", self.peek())):
            braced = self.is_op("{")
            if braced:
                self.advance()
            self.expect_op("(")
            saved = self.abs_depth
            self.abs_depth = 0
            arg = self.expr()
            self.abs_depth = saved
            self.expect_op(")")
            if braced:
                self.expect_op("}")
        elif self.is_op("{"):
            arg = self.brace_arg()
        else:
            arg = self.power()
            if arg.is_Number:
                # the convention \sin 2x = sin(2x): a number and the names glued to it
                while self.tok.kind == "let" or (self.tok.kind == "cmd" and self.tok.value in _GREEK):
                    arg = sp.Mul(arg, self.power())
            nxt = self.tok
            if self.starts_factor(nxt) and not (nxt.kind == "cmd" and (nxt.value in _FUNCS or nxt.value in _MULTI_FUNCS)):
                raise ParseError(f"argument of \\{v} without parentheses is ambiguous")
        if base is not None:
            if base.is_zero or base == 1:
                raise ParseError("logarithm base 0 or 1")
            val = sp.log(arg, base)
        else:
            val = fn(arg)
        if power is not None:
            val = _safe_pow(val, power)
        return val

    # ----------------------------------------------------------------- sets
    def set_literal(self, allow_single: bool = False) -> sp.Basic:
        self.advance()  # \{
        builder = self.set_builder()
        if builder is not None:
            return builder
        items = [self.expr()]
        while self.is_op(","):
            self.advance()
            items.append(self.expr())
        if not self.is_cmd("}"):
            raise ParseError("expected \\}")
        self.advance()
        if len(items) < 2 and not allow_single:
            raise ParseError("\\{x\\} is ambiguous (fractional part or set)")
        return sp.FiniteSet(*items)

    def set_builder(self) -> sp.Basic | None:
        """``\\{x \\mid cond\\}``, ``\\{x : cond\\}``, ``\\{x \\in S \\mid cond\\}`` as
        ``ConditionSet`` (conditions separated by commas are joined with And)."""
        j = self.i
        t = self.toks[j]
        if t.kind != "let":
            return None
        k = j + 1
        while self.toks[k].kind == "op" and self.toks[k].value in ("_", "{", "}") or (
                self.toks[k].kind in ("let", "num") and self.toks[k - 1].kind == "op"
                and self.toks[k - 1].value in ("_", "{")):
            k += 1
        u = self.toks[k]
        has_base = u.kind == "cmd" and u.value == "in"
        if not (has_base or (u.kind == "cmd" and u.value == "mid") or (u.kind == "op" and u.value in ("|", ":"))):
            return None
        var = self.letter()
        if not isinstance(var, sp.Symbol):
            raise ParseError("set-builder variable must be a name")
        base = sp.S.Reals
        if has_base:
            self.advance()
            base = self.any_set() if not (self.tok.kind == "let") else sp.Symbol(self.name_unit())
            if isinstance(base, sp.Symbol):
                raise ParseError("set-builder over a named set")
        if not ((self.tok.kind == "cmd" and self.tok.value == "mid") or self.is_op("|") or self.is_op(":")):
            raise ParseError("set-builder without a condition")
        self.advance()
        conds = [self.condition()]
        while self.is_op(","):
            self.advance()
            conds.append(self.condition())
        if not self.is_cmd("}"):
            raise ParseError("expected \\}")
        self.advance()
        self.flags.add("set_builder")
        self.bound_used |= _letters_of_name(var.name)
        return sp.ConditionSet(var, sp.And(*conds), base)

    def condition(self) -> sp.Basic:
        """One relation or chain inside a set-builder."""
        sides = [self.expr()]
        ops = []
        while True:
            op = self.relop()
            if op is None or op in ("in", "notin", "mid", "nmid", "equiv", ":=") or op in _PREDICATES:
                break
            self.advance()
            ops.append(op)
            sides.append(self.expr())
        if not ops:
            raise ParseError("set-builder condition is not a relation")
        links = [REL_OPS[o](a, b) for o, a, b in zip(ops, sides, sides[1:])]
        if any(lk in (sp.true, sp.false) for lk in links):
            raise ParseError("set-builder condition evaluates to a truth value")
        return sp.And(*links)

    def set_expr(self) -> sp.Basic:
        t = self.tok
        if t.kind == "cmd" and (t.value == "mathbb" or (t.value == "mathbf" and (t.arg or "").strip() in "RZNQC")):
            self.advance()
            letter = (t.arg or "").strip()
            self.exempt_letters.add(letter)
            sets = {"R": sp.S.Reals, "Z": sp.S.Integers, "N": sp.S.Naturals, "Q": sp.S.Rationals,
                    "C": sp.S.Complexes}
            if letter not in sets:
                raise ParseError(f"unknown set \\mathbb{{{letter}}}")
            base = sets[letter]
            if self.is_op("^") or self.is_op("_"):
                self.advance()
                if self.is_op("{"):
                    self.advance()
                    depth = 1
                    inner = []
                    while depth:
                        u = self.advance()
                        if u.kind == "eof":
                            raise ParseError("unclosed set decoration")
                        if self.is_op("{", u):
                            depth += 1
                        elif self.is_op("}", u):
                            depth -= 1
                            if not depth:
                                break
                        inner.append(u)
                    txt = _canonical_tokens(inner)
                else:
                    txt = self.advance().value
                m_bound = re.fullmatch(r"(>|\\geq ?)(\d+)", txt)
                if m_bound and txt not in (">0",):
                    c = sp.Integer(m_bound.group(2))
                    base = base.intersect(sp.Interval(c, sp.oo, left_open=m_bound.group(1) == ">"))
                elif txt in ("+", "*", ">0", "+*", "*+"):
                    positive = sp.Interval.open(0, sp.oo)
                    base = base.intersect(positive) if letter != "N" else sp.S.Naturals
                elif txt in ("\\geq 0", "0", "+0", "\\geq0", "+_0") and letter in ("R", "Z"):
                    base = base.intersect(sp.Interval(0, sp.oo))
                elif txt == "0" and letter == "N":
                    base = sp.S.Naturals0
                else:
                    raise ParseError(f"unknown set decoration {txt!r}")
            if self.is_cmd("setminus"):
                self.advance()
                base = sp.Complement(base, self.set_expr(), evaluate=False)
            return base
        if t.kind == "cmd" and t.value == "{":
            return self.set_literal(allow_single=True)
        if self.is_op("[") or self.is_op("("):
            left_open = self.is_op("(")
            self.advance()
            a = -sp.oo if (self.is_op("-") and self.is_cmd("infty", self.peek())) else None
            if a is not None:
                self.advance()
                self.advance()
            else:
                a = self.expr()
            self.expect_op(",")
            if self.is_cmd("infty") or (self.is_op("+") and self.is_cmd("infty", self.peek())):
                if self.is_op("+"):
                    self.advance()
                self.advance()
                b = sp.oo
            else:
                b = self.expr()
            if self.is_op("]") or self.is_op(")"):
                right_open = self.is_op(")")
                self.advance()
            else:
                raise ParseError("unclosed interval")
            return sp.Interval(a, b, left_open, right_open)
        raise ParseError(f"unsupported set {self.describe(t)}")


def _letters_of_name(name: str) -> set[str]:
    """Latin letters of a canonical name, outside command names and word arguments."""
    stripped = re.sub(r"\\(?:operatorname|mathbb|text)\{[^{}]*\}", " ", name)
    stripped = re.sub(r"\\[A-Za-z]+", " ", stripped)
    return {c for c in stripped if c.isascii() and c.isalpha()}


def latex_letters(latex: str) -> frozenset[str]:
    """Latin letters of a LaTeX string outside command names, ``\\text{…}``,
    ``\\operatorname{…}``, ``\\mathbb{…}`` and environment names."""
    s = re.sub(r"\\(?:operatorname|mathbb|text|textrm|textit|textbf|mbox|begin|end|label)\s*\{[^{}]*\}", " ", latex)
    s = re.sub(r"\\[A-Za-z]+", " ", s)
    return frozenset(c for c in s if c.isascii() and c.isalpha())


def _object_letters(obj: sp.Basic) -> set[str]:
    out: set[str] = set()
    for s in obj.free_symbols:
        if isinstance(s, sp.Symbol):
            out |= _letters_of_name(s.name)
    for f in obj.atoms(AppliedUndef):
        if f.func.__name__ not in _OPAQUE_FUNCS:
            out |= _letters_of_name(f.func.__name__)
    return out


def _check_tree(obj: sp.Basic, allow_infinite_limits: bool = False) -> None:
    """Reject undefined values (and infinity outside the limits of a sum or product)."""
    if obj.has(sp.zoo, sp.nan):
        raise ParseError("undefined value (division by zero)")
    if obj.has(sp.I):
        # SymPy prints I as "i", which reads back as a variable: never let it in
        raise ParseError("imaginary value (even root of a negative number)")
    if obj.has(sp.oo, -sp.oo):
        if not allow_infinite_limits:
            raise ParseError("undefined value (infinity)")
        stripped = obj.replace(lambda e: isinstance(e, (sp.Sum, sp.Product)), lambda e: sp.Symbol("_big_op"))
        if stripped.has(sp.oo, -sp.oo):
            raise ParseError("undefined value (infinity)")


def parse_segment(latex: str, *, functions: frozenset[str] = frozenset(), normalize: bool = True,
                  notation: frozenset[str] = frozenset()) -> Parsed:
    """Parse one segment of LaTeX into a :class:`Parsed` object.

    Args:
        latex: the segment (no ``$``; one relation, chain, expression, membership or set).
        functions: letters read as function names before ``(`` (see :func:`function_letters`).
        normalize: run :func:`recipematch.cas.normalize.normalize_latex` first; ``False``
            is the census's "before normalisation" reading (canonical vocabulary only,
            no chains).
        notation: notations the problem's text declares (:func:`declared_notation`):
            ``"integer_part"`` reads ``[x]`` as ``floor(x)``, ``"fractional_part"`` reads
            ``\\{x\\}`` as ``frac(x)``; without them both are rejected as ambiguous.

    Returns:
        The parsed segment.

    Raises:
        ParseError: with the reason when the segment is outside the grammar, ambiguous,
            or fails the structural letter check.

    Example:
        >>> parse_segment(r"d \\cdot k = 6").obj
        Eq(d*k, 6)
    """
    text = normalize_latex(latex) if normalize else latex.strip()
    if not text:
        raise ParseError("empty formula")
    if normalize:
        text = _strip_outer_parens(text)
    if len(text) > 1000:
        raise ParseError("formula longer than 1000 characters")
    toks = _tokenize(text)
    if len(toks) > 600:
        raise ParseError("formula longer than 600 tokens")
    p = _Parser(toks, functions, strict=not normalize, notation=notation)
    for tk in toks:
        if tk.kind == "cmd" and tk.value in ("text", "textrm", "textit", "textbf", "mbox", "hbox"):
            raise ParseError("words inside a formula")
        if not normalize and tk.kind == "cmd" and tk.value in (
                "left", "right", "dfrac", "tfrac", "le", "ge", "ne", "leqslant", "geqslant",
                "displaystyle", ",", ";", "!", ":", "quad", "mathrm", "lvert", "rvert"):
            raise ParseError(f"\\{tk.value} needs the normaliser")
    try:
        kind, ops, sides = p.segment()
    except RecursionError as exc:
        raise ParseError("formula nested too deeply") from exc
    if kind in ("chain",) and not normalize:
        raise ParseError("chained relation needs the normaliser")
    if kind == "predicate":
        obj = sp.Function("\\" + ops[0])(sides[0], sides[1])
    elif kind == "signature":
        obj = sides[0]
    elif kind in ("divides", "congruence"):
        if kind == "divides":
            a, b = sides
            body = sp.Mod(b, a)
        else:
            a, b, n = sides
            body = sp.Mod(a - b, n)
        obj = (sp.Ne if ops[0] == "nmid" else sp.Eq)(body, 0, evaluate=False)
        p.flags.add("integer_semantics")
    elif kind == "membership":
        obj = sp.Contains(sides[0], sides[1], evaluate=False)
        if ops[0] == "notin":
            obj = sp.Not(obj, evaluate=False)
    elif kind in ("relation", "chain"):
        if "!=" in ops and len(ops) > 1:
            raise ParseError("\\neq inside a chain")
        dirs = {("<" if o in ("<", "<=") else ">") for o in ops if o not in ("=", "!=")}
        if len(dirs) > 1:
            raise ParseError("chain mixes < and >")
        links = []
        for k, op in enumerate(ops):
            a, b = sides[k], sides[k + 1]
            if isinstance(a, (sp.Tuple, sp.Set)) or isinstance(b, (sp.Tuple, sp.Set)):
                if op != "=" or len(ops) > 1:
                    raise ParseError("only = between tuples or sets")
                links.append(sp.Eq(a, b, evaluate=False))
                continue
            # the relation is always built unevaluated (evaluating it would compute every
            # large number in it); whether it reduces to a truth value is asked of a copy
            # where large numbers, factorials and sums are opaque symbols
            heavy = {}
            for side in (a, b):
                for node in sp.preorder_traversal(side):
                    if _heavy(node) and node not in heavy:
                        heavy[node] = sp.Dummy(f"heavy{len(heavy)}")
            probe = REL_OPS[op](a.xreplace(heavy), b.xreplace(heavy)) if heavy else REL_OPS[op](a, b)
            if probe in (sp.true, sp.false) or (heavy and not (a.free_symbols or b.free_symbols)):
                if a.free_symbols or b.free_symbols:
                    raise ParseError("relation evaluates to a truth value (its unknowns cancel)")
                p.flags.add("numeric")
            links.append(REL_OPS[op](a, b, evaluate=False))
        obj = links[0] if len(links) == 1 else sp.And(*links, evaluate=False)
    else:
        obj = sides[0]
    if kind in ("relation", "chain", "expression"):
        _check_tree(obj, allow_infinite_limits="big_operator" in p.flags)
    tok_letters = {t.value for t in toks if t.kind == "let"}
    for t in toks:
        if t.kind == "cmd" and t.arg is not None and t.value in _DECORATIONS:
            tok_letters |= {c for c in t.arg if c.isascii() and c.isalpha()}
    got = _object_letters(obj) | p.bound_used
    tok_letters -= p.exempt_letters
    lost = tok_letters - got
    if lost:
        raise ParseError("structural check: letters " + ", ".join(sorted(lost)) + " lost in the parse")
    extra = got - tok_letters
    if extra:
        raise ParseError("structural check: letters " + ", ".join(sorted(extra)) + " not in the input")
    return Parsed(kind, tuple(ops), tuple(sides), obj, frozenset(tok_letters), frozenset(p.flags))


_TOP_REL = re.compile(r"=|<|>|\\leq|\\geq|\\neq")


def _strip_outer_parens(text: str) -> str:
    """``(n > 2)``: one pair of parentheses around a whole relation is punctuation."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for k, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0 and k != len(text) - 1:
                return text
    inner = text[1:-1]
    if "," in inner or not _TOP_REL.search(inner):
        return text
    return inner.strip()


def try_parse(latex: str, *, functions: frozenset[str] = frozenset(), normalize: bool = True,
              notation: frozenset[str] = frozenset()) -> tuple[Parsed | None, str | None]:
    """:func:`parse_segment` that returns ``(parsed, None)`` or ``(None, reason)``; it never
    raises on any input (a ``RecursionError`` or an unexpected error becomes a reason)."""
    try:
        return parse_segment(latex, functions=functions, normalize=normalize, notation=notation), None
    except ParseError as exc:
        return None, str(exc)
    except RecursionError:
        return None, "formula nested too deeply"
    except (TypeError, ValueError, AttributeError, IndexError, KeyError, ZeroDivisionError,
            OverflowError, NotImplementedError) as exc:
        return None, f"internal parser error: {type(exc).__name__}: {exc}"


_INTEGER_PART_WORDS = re.compile(
    r"integer part|integral part|partie enti|parte entera|parte intera|parte inteira|целая часть|"
    r"целой част|phần nguyên|greatest integer|Ganzteil|größte ganze|część całkowit|egészrész|"
    r"partea întreagă|cel mai mare întreg", re.IGNORECASE)
_FRACTIONAL_PART_WORDS = re.compile(
    r"fractional part|partie fractionnaire|parte fraccionaria|parte frazionaria|parte fracionária|"
    r"дробная часть|дробной част|phần lẻ|Bruchteil|część ułamkow|törtrész|partea fracționară",
    re.IGNORECASE)


_DIRECTED_WORDS = re.compile(
    r"\\vec\b|\\overrightarrow|\\overleftarrow|\bvectors?\b|vecteur|vektor|vettor|wektor|вектор|"
    r"véc ?tơ|vectơ|directed (?:segment|length|distance)|oriented (?:segment|length)|"
    r"signed (?:length|distance|segment)|segments? orient|mesure algébrique|gerichtete|"
    r"ориентированн|направленн|有向|向量|벡터", re.IGNORECASE)
#: Substrings (lower case) one of which every match of :data:`_INTEGER_PART_WORDS` or
#: :data:`_FRACTIONAL_PART_WORDS` contains (a fast filter).
_PART_KEYS = ("part", "целая", "целой", "дробн", "phần", "greatest", "ganzteil", "größte", "bruchteil",
              "część", "egészrész", "törtrész", "întreg")
#: Substrings one of which every match of :data:`_DIRECTED_WORDS` contains (a fast filter).
_DIRECTED_KEYS = ("\\vec", "\\overrightarrow", "\\overleftarrow", "vector", "vecteur", "vektor", "vettor",
                  "wektor", "вектор", "véc", "vectơ", "directed", "oriented", "signed", "orient", "algébrique",
                  "gerichtete", "ориентированн", "направленн", "有向", "向量", "벡터")
_POINT_UNIT = r"[A-Z]'*(?:_\{[^{}]*\}'*)?"
_SEGMENT_NAME = re.compile(rf"({_POINT_UNIT})({_POINT_UNIT})")


def segment_points(name: str) -> tuple[str, str] | None:
    """The two points of a segment name (``"PC"`` → ``("P", "C")``, ``"A_{1}C_{1}"`` →
    ``("A_{1}", "C_{1}")``), or None when ``name`` is not exactly two point names."""
    m = _SEGMENT_NAME.fullmatch(name)
    return (m.group(1), m.group(2)) if m else None


def unsigned_segment_name(name: str) -> str:
    """The name of the unsigned length ``name`` denotes under the notation rule (module
    docstring): its two points in sorted order (``"PC"`` → ``"CP"``); any other name is
    returned unchanged."""
    pts = segment_points(name)
    return name if pts is None else "".join(sorted(pts))


def declared_notation(text: str) -> frozenset[str]:
    """Notations a problem declares in words (any of the corpus's languages):
    ``"integer_part"`` ("[x] denotes the integer part of x"), ``"fractional_part"``, and
    ``"directed_segments"`` (vectors or directed segments are declared: two-point names
    keep their order, see the notation rule in the module docstring)."""
    out = set()
    low = text.lower()
    if any(k in low for k in _DIRECTED_KEYS) and _DIRECTED_WORDS.search(text):
        out.add("directed_segments")
    if any(k in low for k in _PART_KEYS):
        if _INTEGER_PART_WORDS.search(text):
            out.add("integer_part")
        if _FRACTIONAL_PART_WORDS.search(text):
            out.add("fractional_part")
    return frozenset(out)


_DEFAULT_FUNCTION_LETTERS = frozenset("fgFGPQ")


def function_letters(latex_spans: list[str]) -> frozenset[str]:
    """Letters the problem uses as function names.

    Rule (one per problem, shared by every span and by printed re-parses): a letter is a
    function when it is followed by ``(`` somewhere and either it is one of ``f g F G P Q``,
    or it is declared with ``L:``/``L\\colon``, or every occurrence of it (at least two) is
    followed by ``(``. Otherwise ``a(b+c)`` is a product.

    Args:
        latex_spans: the contents of the problem's math spans.

    Returns:
        The function letters.
    """
    before_paren: dict[str, int] = {}
    total: dict[str, int] = {}
    declared: set[str] = set()
    for s in latex_spans:
        s2 = re.sub(r"\\[A-Za-z]+", " ", re.sub(r"\\left\s*\(", "(", s))
        for m in re.finditer(r"(?<![A-Za-z])([A-Za-z])(?![A-Za-z])('*)", s2):
            ch = m.group(1)
            total[ch] = total.get(ch, 0) + 1
            rest = s2[m.end():].lstrip()
            if rest.startswith("(") or rest.startswith("{("):
                before_paren[ch] = before_paren.get(ch, 0) + 1
            if rest.startswith(":") or rest.startswith("\\colon"):
                declared.add(ch)
        for m in re.finditer(r"(?<![A-Za-z\\])([A-Za-z])\s*\\colon", s):
            declared.add(m.group(1))
    out = set()
    for ch, k in before_paren.items():
        if ch in _DEFAULT_FUNCTION_LETTERS or ch in declared or (k >= 2 and k == total.get(ch, 0)):
            out.add(ch)
    return frozenset(out)


def _symbol_names(obj: sp.Basic) -> dict[sp.Symbol, str]:
    return {s: s.name for s in obj.free_symbols}


_LATEX_OP = {"=": "=", "<": "<", "<=": "\\leq", ">": ">", ">=": "\\geq", "!=": "\\neq"}


def to_latex(obj: sp.Basic | tuple[tuple[str, ...], tuple[sp.Basic, ...]]) -> str:
    """Print with SymPy's LaTeX printer, each symbol under its own canonical name.

    Args:
        obj: a SymPy expression or relation, or ``(ops, sides)`` of a chain, printed as
            ``latex(side_0) op_1 latex(side_1) …``.

    Returns:
        LaTeX text (no ``$``).
    """
    if isinstance(obj, tuple):
        ops, sides = obj
        parts = [to_latex(sides[0])]
        for op, side in zip(ops, sides[1:]):
            parts.append(_LATEX_OP[op])
            parts.append(to_latex(side))
        return " ".join(parts)
    return sp.latex(obj, symbol_names=_symbol_names(obj))
