"""The verbatim prompts of the paper's Appendix F, loaded and rendered byte for byte (SPEC §3.2).

A prompt is a pair of files in the package data folder ``recipematch/prompts/``:
``<name>.system.txt`` and ``<name>.user.txt``. They are experimental inputs, so this module
never edits them: :meth:`PromptTemplate.render` sends exactly the file text with the slots
filled in, and nothing else (no stripping, no added newline).

Two ways a part is filled (``prompts/README.md``):

* a *formatted* part contains at least one documented slot (``{problem}``, ``{n_pos}``, ...)
  and goes through :meth:`str.format`, so its doubled braces ``{{ }}`` become single ones;
* a *literal* part contains no documented slot. It is sent as stored and never passed
  through :meth:`str.format`. ``judge.system.txt`` and ``meld_screen.system.txt`` are literal
  and contain single literal braces (the judge's JSON answer format).

Template identity (:attr:`PromptTemplate.sha256`) is the SHA-256 hex digest of::

    system_file_bytes + b"\\x00" + user_file_bytes

where both are the files' raw UTF-8 bytes as stored (before any slot is filled). The NUL
byte cannot occur in either text file, so the pair is unambiguous. ``system_sha256`` and
``user_sha256`` are the SHA-256 of each file on its own (the README's "SHA-256 of its text").

The separate-calls variant of SPEC §3.2 ("cuts D1 into a positives-only and a
near-misses-only call") is built here by string surgery, see :func:`split_d1_prompt`.
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass, field
from importlib import resources

__all__ = [
    "DOCUMENTED_SLOTS",
    "PromptTemplate",
    "load_prompt",
    "available_prompts",
    "split_d1_prompt",
    "template_sha256",
    "SPLIT_POSITIVES_NAME",
    "SPLIT_NEAR_MISSES_NAME",
]

#: The slot names ``prompts/README.md`` lists. A part is formatted iff it contains one.
DOCUMENTED_SLOTS: frozenset[str] = frozenset(
    {
        "n_pos",
        "n_neg",
        "problem",
        "anchor",
        "candidate",
        "n_pairs",
        "field_1",
        "field_2",
        "connection",
        "covered",
        "framing_1",
        "framing_2",
        "statement_1",
        "statement_2",
    }
)

#: Names of the two templates :func:`split_d1_prompt` derives from ``d1_recipe``.
SPLIT_POSITIVES_NAME = "d1_recipe:positives_only"
SPLIT_NEAR_MISSES_NAME = "d1_recipe:near_misses_only"


def template_sha256(system: str, user: str) -> str:
    """SHA-256 hex digest of ``system.encode() + b"\\x00" + user.encode()`` (UTF-8).

    Args:
        system: the unrendered system template text, exactly as stored.
        user: the unrendered user template text, exactly as stored.

    Returns:
        64 lowercase hex characters.
    """
    return hashlib.sha256(system.encode("utf-8") + b"\x00" + user.encode("utf-8")).hexdigest()


def _slots_of(text: str) -> frozenset[str] | None:
    """Slot names if ``text`` is a formatted part, ``None`` if it is literal.

    Raises:
        ValueError: a formatted part that :class:`string.Formatter` cannot parse, or that
            uses a field which is not a documented slot (positional, attribute, index or
            conversion fields included): such a file would be mangled by ``str.format``.
    """
    if not any("{" + s + "}" in text for s in DOCUMENTED_SLOTS):
        return None
    names: set[str] = set()
    for _literal, field_name, spec, conversion in string.Formatter().parse(text):
        if field_name is None:
            continue
        if field_name not in DOCUMENTED_SLOTS or spec or conversion:
            raise ValueError(
                f"formatted prompt part uses field {{{field_name}}} which is not a documented slot"
            )
        names.add(field_name)
    return frozenset(names)


@dataclass(frozen=True)
class PromptTemplate:
    """One prompt: system and user templates as stored, plus their identity.

    Attributes:
        name: e.g. ``"d1_recipe"``, ``"judge"``, or a derived name such as
            ``"d1_recipe:positives_only"``.
        system: unrendered system text, exactly as stored (str of the file's UTF-8 bytes).
        user: unrendered user text, exactly as stored.
        sha256: :func:`template_sha256` of ``system`` and ``user`` (64 hex characters).
        system_sha256, user_sha256: SHA-256 hex of each part's UTF-8 bytes on its own.
        system_slots, user_slots: slot names of each part; ``None`` for a literal part
            (never passed through :meth:`str.format`).
        derived_from: ``None`` for a file-backed prompt; for a derived prompt, the
            ``sha256`` of the template it was cut from.

    Example:
        >>> t = load_prompt("judge")
        >>> system, user = t.render(anchor="A", candidate="B")
        >>> system == t.system  # the judge's system prompt is literal
        True
    """

    name: str
    system: str
    user: str
    sha256: str = field(init=False)
    system_sha256: str = field(init=False)
    user_sha256: str = field(init=False)
    system_slots: frozenset[str] | None = field(init=False)
    user_slots: frozenset[str] | None = field(init=False)
    derived_from: str | None = None

    def __post_init__(self) -> None:
        if "\x00" in self.system or "\x00" in self.user:
            raise ValueError(f"prompt {self.name!r} contains a NUL byte")
        object.__setattr__(self, "sha256", template_sha256(self.system, self.user))
        object.__setattr__(self, "system_sha256", hashlib.sha256(self.system.encode("utf-8")).hexdigest())
        object.__setattr__(self, "user_sha256", hashlib.sha256(self.user.encode("utf-8")).hexdigest())
        object.__setattr__(self, "system_slots", _slots_of(self.system))
        object.__setattr__(self, "user_slots", _slots_of(self.user))

    @property
    def slots(self) -> frozenset[str]:
        """Every slot name the template needs (union over both parts)."""
        return (self.system_slots or frozenset()) | (self.user_slots or frozenset())

    def render(self, **slots: object) -> tuple[str, str]:
        """Fill the slots and return ``(system_text, user_text)`` to send byte for byte.

        A literal part is returned unchanged (never formatted). Values are inserted with
        ``str(value)``; braces inside a value are kept as they are (``str.format`` does not
        re-read substituted text).

        Args:
            **slots: exactly the names in :attr:`slots`.

        Raises:
            ValueError: a slot is missing, or an argument names no slot of this template.
        """
        missing = sorted(self.slots - slots.keys())
        extra = sorted(slots.keys() - self.slots)
        if missing or extra:
            raise ValueError(
                f"prompt {self.name!r} needs slots {sorted(self.slots)}; missing {missing}, unknown {extra}"
            )

        def fill(text: str, part_slots: frozenset[str] | None) -> str:
            if part_slots is None:
                return text
            return text.format(**{k: slots[k] for k in part_slots})

        return fill(self.system, self.system_slots), fill(self.user, self.user_slots)


def _prompt_dir():
    return resources.files("recipematch").joinpath("prompts")


def available_prompts() -> list[str]:
    """Names that :func:`load_prompt` accepts (sorted): every ``<name>`` with both a
    ``<name>.system.txt`` and a ``<name>.user.txt`` file, plus the two derived D1 split
    prompts."""
    files = {p.name for p in _prompt_dir().iterdir()}
    names = {f[: -len(".system.txt")] for f in files if f.endswith(".system.txt")}
    paired = {n for n in names if f"{n}.user.txt" in files}
    return sorted(paired | {SPLIT_POSITIVES_NAME, SPLIT_NEAR_MISSES_NAME})


def _read(fname: str) -> str:
    path = _prompt_dir().joinpath(fname)
    if not path.is_file():
        raise KeyError(fname)
    # read bytes and decode strictly: no newline translation, no BOM stripping
    return path.read_bytes().decode("utf-8")


def load_prompt(name: str) -> PromptTemplate:
    """Load a prompt by name from the package data (files are read, never modified).

    Args:
        name: ``d1_recipe``, ``d2_paraphrase``, ``d3_style``, ``d4_restatement``,
            ``d5_survey``, ``unrelated_negatives``, ``judge``, ``meld_screen``, or one of
            the derived names ``d1_recipe:positives_only`` / ``d1_recipe:near_misses_only``
            (see :func:`split_d1_prompt`).

    Raises:
        KeyError: no such prompt (the message lists :func:`available_prompts`).
    """
    if name in (SPLIT_POSITIVES_NAME, SPLIT_NEAR_MISSES_NAME):
        pos, neg = split_d1_prompt(load_prompt("d1_recipe"))
        return pos if name == SPLIT_POSITIVES_NAME else neg
    try:
        system = _read(f"{name}.system.txt")
        user = _read(f"{name}.user.txt")
    except KeyError:
        raise KeyError(f"unknown prompt {name!r}; available: {available_prompts()}") from None
    return PromptTemplate(name=name, system=system, user=user)


def _section(lines: list[str], start_prefix: str, end_prefix: str) -> tuple[int, int]:
    starts = [i for i, ln in enumerate(lines) if ln.startswith(start_prefix)]
    ends = [i for i, ln in enumerate(lines) if ln.startswith(end_prefix)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] <= starts[0]:
        raise ValueError(f"cannot locate section {start_prefix!r}..{end_prefix!r} in the D1 prompt")
    return starts[0], ends[0]


def split_d1_prompt(d1: PromptTemplate) -> tuple[PromptTemplate, PromptTemplate]:
    """Cut D1 into a positives-only and a near-misses-only prompt (SPEC §3.2, paper App. C).

    The paper cut the Appendix-F prompt "by string surgery ... every surviving line verbatim
    D1's". Our surgery deletes whole lines and changes none:

    * positives-only (``d1_recipe:positives_only``): the ``## Step 2`` block (from its
      heading up to, not including, ``## Step 3``) is removed;
    * near-misses-only (``d1_recipe:near_misses_only``): the ``## Step 1`` block (from its
      heading up to, not including, ``## Step 2``) is removed.

    Everything else stays, including the JSON schema with both arrays and the rule
    "Exactly {n_pos} equivalent and {n_neg} near-miss variants.": the caller renders the
    positives-only prompt with ``n_neg=0`` and the near-misses-only prompt with ``n_pos=0``,
    so the schema and the count rule stay valid and consistent (the empty array is
    expected). The user template is D1's, unchanged. Each derived template has its own
    :attr:`PromptTemplate.sha256` and ``derived_from = d1.sha256``.

    Raises:
        ValueError: ``d1`` lacks exactly one ``## Step 1``/``## Step 2``/``## Step 3``
            heading in that order (e.g. it is not D1).
    """
    lines = d1.system.splitlines(keepends=True)
    s1, s2 = _section(lines, "## Step 1", "## Step 2")
    s2b, s3 = _section(lines, "## Step 2", "## Step 3")
    assert s2 == s2b
    pos_text = "".join(lines[:s2] + lines[s3:])
    neg_text = "".join(lines[:s1] + lines[s2:])
    pos = PromptTemplate(name=SPLIT_POSITIVES_NAME, system=pos_text, user=d1.user, derived_from=d1.sha256)
    neg = PromptTemplate(name=SPLIT_NEAR_MISSES_NAME, system=neg_text, user=d1.user, derived_from=d1.sha256)
    return pos, neg
