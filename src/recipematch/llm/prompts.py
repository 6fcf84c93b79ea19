"""The verbatim prompts of the paper's Appendix F, loaded and rendered byte for byte (used by
the LLM-written arms of Sections 3 and 5 and the controls of Appendix C), plus a user's own
prompts declared by a sidecar file (:func:`load_custom_prompt`).

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

The shipped files are pinned: :data:`SHIPPED_FILE_SHA256` records the SHA-256 of every file
as printed in Appendix F, and :func:`verify_shipped_prompts` checks the package copies
against it.

The separate-calls variant of Appendix C (D1 cut into a positives-only and a
near-misses-only call) is built here by string surgery, see :func:`split_d1_prompt`.

A user's own prompt (a benchmark's recipe that is not in the ladder) is a text file or two
plus a YAML (or JSON) sidecar that declares its slots and its answer schema, e.g.
``my_recipe.prompt.yaml``::

    name: my_recipe                  # optional; default: the sidecar's name before ".prompt"
    role: generator                  # generator (default) or judge
    system: my_recipe.system.txt     # optional: without it no system message is sent
    user: my_recipe.user.txt         # required; paths relative to the sidecar
    slots: [problem, n_pos, n_neg]   # generator: problem required, n_pos/n_neg optional;
                                     # judge: exactly anchor and candidate
    answer:                          # generator only (a judge answers in the judge schema)
      top_fields: [original_problem] # optional required top-level strings (default none)
      positives: {key: equivalent_variants, fields: [justification, tags]}
      near_misses: {key: near_miss_variants, fields: [justification]}   # omit: positives only

The texts are sent byte for byte, as the shipped ones; a part that contains a declared slot
goes through ``str.format`` (so it writes literal braces as ``{{ }}``), a part without one is
sent as stored.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from recipematch.config import load_yaml_file
from recipematch.errors import RecipematchError, short_repr

__all__ = [
    "load_prompt_parts",
    "fill_slots",
    "DOCUMENTED_SLOTS",
    "PromptTemplate",
    "load_prompt",
    "available_prompts",
    "split_d1_prompt",
    "template_sha256",
    "SPLIT_POSITIVES_NAME",
    "SPLIT_NEAR_MISSES_NAME",
    "SHIPPED_FILE_SHA256",
    "verify_shipped_prompts",
    "CustomPrompt",
    "load_custom_prompt",
    "GENERATOR_SLOTS",
    "JUDGE_SLOTS",
]

#: SHA-256 of every shipped prompt file, as printed in the paper's Appendix F (computed from
#: the project's original copies). The package files must match byte for byte.
SHIPPED_FILE_SHA256: dict[str, str] = {
    "d1_recipe.system.txt": "40c6936cf0b9cd0cde2584dbb17655fc38dd2dd083f9bb947efe65702bc74d87",
    "d1_recipe.user.txt": "73fd3a402eae56a97d6f2aa72eff24f1c0df5b33850e1f8ad20a831c94cfc037",
    "d2_paraphrase.system.txt": "3896e6bdcda75b20f3af6959b286a5619890fcd9b8c978e879bb11c99c2cd934",
    "d2_paraphrase.user.txt": "3679bad8907b1c9d98dfb6607158cebd385c098f9b6c626913257399a0f683f4",
    "d3_style.system.txt": "96928569c8b0f6987700c5661aa506e121cb067a8fdacbe9b425e68f0ad2e1a7",
    "d3_style.user.txt": "dcff835ab15070362ad9bc3a77e71c31461036925310da10d4cbddd88195bf0e",
    "d4_restatement.system.txt": "2c0aedeeb92c836d4ceb0f9377b7155d24ff9a6873d8045e5e4a5d3d7f879fc5",
    "d4_restatement.user.txt": "3da3d0c0ff3f75d500405d88422b95109687fce8412e29d85da32ec4a864735a",
    "d5_survey.system.txt": "b7bb05f55542637e8d8ecfbd50f3728a9da62a8823e63c891dc425daeb0b62f6",
    "d5_survey.user.txt": "f693cd0d1a70ac379e239661b8cabe52de6bcda61cdc83b3e36de9a7845567a0",
    "judge.system.txt": "a2040fe5009d11b4a4f4761720a719cceaac93e6d14a2cdde5bb291ac3acdbfc",
    "judge.user.txt": "c0797f51ce0225a8e0a0ddc89d97cad6bfd4ed6e9362a5a27803c12426e73239",
    "meld_altprompt.system.txt": "ba2a60249228273107a5f49e36bbf701ae747533e12af86efd1def2cad26ce60",
    "meld_generate.system.txt": "8d4b6ee0785e2455ac1851dc6bc2f1a80e22ca5ca0b8d9646d81f1672d9bbd22",
    "meld_generate.user_first.txt": "f90257fefe6995538d06444e5b0bbf10d1f001d281299972519c14bcc5f66848",
    "meld_generate.user_later.txt": "455d0e81f71e6ffe85839a668755771390561f892ffb55b765bdecf455e84293",
    "meld_screen.system.txt": "7be78ce293c6a7e284d4b8d7344cd5cd2d8b6b1b6ba808b93d47f11417ce5475",
    "meld_screen.user.txt": "dd8ba6b7f9cdce5ea4fbec7399798c212c6b212ab29d16c8e66c627570ee0c46",
    "saber_core_idea.txt": "4b8a8da6dc151c5c6860e9f72640a648973d1c1cd4d6f412988586d1a02b5df3",
    "unrelated_negatives.system.txt": "295a4d2caabefd3c6a374cc7cd046f4fbc2344717223081eb8336b414e915b68",
    "unrelated_negatives.user.txt": "3da3d0c0ff3f75d500405d88422b95109687fce8412e29d85da32ec4a864735a",
}

#: Slots an arm run fills in a user's generator prompt; ``problem`` is required.
GENERATOR_SLOTS: frozenset[str] = frozenset({"problem", "n_pos", "n_neg"})
#: Slots of a judge prompt; both are required.
JUDGE_SLOTS: frozenset[str] = frozenset({"anchor", "candidate"})

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


def load_prompt_parts(name: str, system_file: str, user_file: str) -> PromptTemplate:
    """A shipped prompt whose parts are files of other names: the MELD generation prompt, one
    system prompt with two user turns (``meld_generate.user_first`` / ``user_later``, the
    paper's Appendix F), which :func:`load_prompt` cannot pair by name.

    Raises:
        KeyError: a file that is not shipped.
    """
    try:
        return PromptTemplate(name=name, system=_read(system_file), user=_read(user_file))
    except KeyError as e:
        raise KeyError(f"prompt file {e.args[0]!r} is not shipped") from None


def fill_slots(template: str, values: dict[str, str], what: str) -> str:
    """A user's template (judge, pairwise judge, topic scorer) with each ``{{name}}`` of
    ``values`` replaced verbatim in one pass, so a value holding ``{{name}}`` is not itself
    replaced and JSON braces in the template stay as they are.

    Raises:
        RecipematchError: the template lacks one of the slots (``what`` names it).
    """
    missing = ["{{" + k + "}}" for k in values if "{{" + k + "}}" not in template]
    if missing:
        raise RecipematchError(f"{what}: the template lacks the slots {missing}")
    return re.sub(r"\{\{(" + "|".join(map(re.escape, values)) + r")\}\}", lambda m: values[m.group(1)], template)


def _section(lines: list[str], start_prefix: str, end_prefix: str) -> tuple[int, int]:
    starts = [i for i, ln in enumerate(lines) if ln.startswith(start_prefix)]
    ends = [i for i, ln in enumerate(lines) if ln.startswith(end_prefix)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] <= starts[0]:
        raise ValueError(f"cannot locate section {start_prefix!r}..{end_prefix!r} in the D1 prompt")
    return starts[0], ends[0]


def split_d1_prompt(d1: PromptTemplate) -> tuple[PromptTemplate, PromptTemplate]:
    """Cut D1 into a positives-only and a near-misses-only prompt (paper Appendix C).

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


def verify_shipped_prompts() -> dict[str, str]:
    """Check every shipped prompt file against :data:`SHIPPED_FILE_SHA256`.

    Returns:
        ``{file name: problem}`` for each file that is missing, differs from its recorded
        hash, or is not recorded; empty when all match byte for byte.
    """
    problems: dict[str, str] = {}
    present = {p.name for p in _prompt_dir().iterdir() if p.name.endswith(".txt")}
    for name, want in sorted(SHIPPED_FILE_SHA256.items()):
        if name not in present:
            problems[name] = "missing"
            continue
        got = hashlib.sha256(_prompt_dir().joinpath(name).read_bytes()).hexdigest()
        if got != want:
            problems[name] = f"sha256 {got} differs from the recorded {want}"
    for name in sorted(present - SHIPPED_FILE_SHA256.keys()):
        problems[name] = "not a recorded prompt file"
    return problems


@dataclass(frozen=True)
class CustomPrompt:
    """A user's prompt declared by a sidecar (see the module docstring).

    Attributes:
        template: the :class:`PromptTemplate` (``sha256`` identifies it in the call store
            and in recordings, as for the shipped prompts).
        role: ``"generator"`` or ``"judge"``.
        schema: the answer schema (:class:`recipematch.llm.parsing.PromptSchema`) of a
            generator prompt; ``None`` for a judge (it answers in the judge schema).
        sidecar: the sidecar file it was declared by.
    """

    template: PromptTemplate
    role: str
    schema: Any
    sidecar: Path

    @property
    def name(self) -> str:
        return self.template.name

    @property
    def has_near_misses(self) -> bool:
        return self.schema is not None and self.schema.negatives_key is not None


_SIDECAR_KEYS = {"name", "role", "system", "user", "slots", "answer"}
_ANSWER_KEYS = {"top_fields", "positives", "near_misses"}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and _IDENT.fullmatch(v) for v in value):
        raise RecipematchError(f"{where} must be a list of field names (letters, digits, _), got {short_repr(value, 120)}")
    if len(set(value)) != len(value):
        raise RecipematchError(f"{where} names a field twice: {short_repr(value, 120)}")
    return tuple(value)


def _item_list(spec: Any, where: str) -> tuple[str, tuple[str, ...]]:
    if not isinstance(spec, Mapping) or "key" not in spec or set(spec) - {"key", "fields"}:
        raise RecipematchError(f"{where} must be a mapping {{key: <list name>, fields: [...]}}, got {short_repr(spec, 120)}")
    key = spec["key"]
    if not isinstance(key, str) or not _IDENT.fullmatch(key):
        raise RecipematchError(f"{where}.key must be a field name, got {short_repr(key, 80)}")
    fields = _names(spec.get("fields", []), f"{where}.fields")
    if "problem" in fields:
        raise RecipematchError(f"{where}.fields must not list 'problem' (every item has it)")
    return key, fields


def _read_prompt_file(sidecar: Path, key: str, rel: Any) -> str:
    if not isinstance(rel, str) or not rel:
        raise RecipematchError(f"{sidecar}: key {key!r} must be a file name, got {short_repr(rel, 80)}")
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise RecipematchError(f"{sidecar}: key {key!r} must name a file next to the sidecar (no absolute path, "
                               f"no '..'), got {short_repr(rel, 80)}")
    path = (sidecar.parent / rel)
    if path.is_dir():
        raise RecipematchError(f"{sidecar}: key {key!r} names {path}, a folder (give the prompt text file)")
    if not path.is_file():
        raise RecipematchError(f"{sidecar}: key {key!r} names {path}, which does not exist")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecipematchError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None


def load_custom_prompt_spec(sidecar: str | Path) -> Mapping[str, Any]:
    """The mapping a prompt sidecar holds, read with the project's YAML loader (aliases
    bounded: :func:`recipematch.config.load_yaml_text`); its keys are checked by
    :func:`load_custom_prompt`.

    Raises:
        RecipematchError: the sidecar is a folder, missing, not UTF-8, not valid YAML, an
            alias expansion past the bound, or not a mapping.
    """
    sidecar = Path(sidecar)
    if sidecar.is_dir():
        raise RecipematchError(f"prompt sidecar {sidecar} is a folder: give the *.prompt.yaml file")
    if not sidecar.is_file():
        raise RecipematchError(f"prompt sidecar {sidecar} does not exist")
    spec = load_yaml_file(sidecar)
    if not isinstance(spec, Mapping):
        raise RecipematchError(f"{sidecar}: must hold a mapping (keys {sorted(_SIDECAR_KEYS)})")
    return spec


def load_custom_prompt(sidecar: str | Path) -> CustomPrompt:
    """Load a user's prompt from its sidecar (format in the module docstring), for the
    audit of a benchmark built with a prompt outside the Appendix-F ladder.

    Checks, each a :class:`~recipematch.errors.RecipematchError` naming the sidecar (or
    the text file) and the key: the sidecar is a YAML/JSON mapping with only known keys;
    ``user`` (and ``system`` when given) name existing UTF-8 files; ``slots`` lists only
    slots the role can fill, including the required ones (``problem`` for a generator,
    ``anchor`` and ``candidate`` for a judge); every declared slot occurs in the texts and
    the texts use no undeclared ``{field}``; a generator has an ``answer`` with
    ``positives`` (``near_misses`` optional) and declares ``n_neg`` only when its answer has
    near-misses; the name is not a shipped prompt's.

    Returns:
        A :class:`CustomPrompt`. The texts are kept byte for byte.
    """
    from recipematch.llm.parsing import PromptSchema  # lazy: import cycle with recipematch.llm.parsing

    sidecar = Path(sidecar)
    spec = load_custom_prompt_spec(sidecar)
    unknown = sorted(set(spec) - _SIDECAR_KEYS)
    if unknown:
        raise RecipematchError(f"{sidecar}: unknown key(s) {unknown}; known: {sorted(_SIDECAR_KEYS)}")
    stem = sidecar.name.split(".prompt")[0] if ".prompt" in sidecar.name else sidecar.stem
    name = spec.get("name", stem)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
        raise RecipematchError(f"{sidecar}: key 'name' must be a simple name, got {short_repr(name, 80)}")
    shipped = {f.split(".")[0] for f in SHIPPED_FILE_SHA256} | {SPLIT_POSITIVES_NAME, SPLIT_NEAR_MISSES_NAME}
    if name in shipped:
        raise RecipematchError(f"{sidecar}: name {name!r} is a shipped prompt's; give your prompt its own name")
    role = spec.get("role", "generator")
    if role not in ("generator", "judge"):
        raise RecipematchError(f"{sidecar}: key 'role' must be generator or judge, got {short_repr(role, 40)}")
    if "user" not in spec:
        raise RecipematchError(f"{sidecar}: key 'user' (the user-message file) is missing")
    user = _read_prompt_file(sidecar, "user", spec["user"])
    system = _read_prompt_file(sidecar, "system", spec["system"]) if spec.get("system") is not None else ""
    if "slots" not in spec:
        raise RecipematchError(f"{sidecar}: key 'slots' is missing (list the slots the texts use)")
    slots = frozenset(_names(spec["slots"], f"{sidecar}: key 'slots'"))
    allowed, required = (GENERATOR_SLOTS, {"problem"}) if role == "generator" else (JUDGE_SLOTS, set(JUDGE_SLOTS))
    if slots - allowed:
        raise RecipematchError(f"{sidecar}: slot(s) {sorted(slots - allowed)} cannot be filled for a {role} "
                               f"prompt; allowed: {sorted(allowed)}")
    if required - slots:
        raise RecipematchError(f"{sidecar}: a {role} prompt needs slot(s) {sorted(required - slots)}; "
                               f"key 'slots' lists {sorted(slots)}")
    for part, text, key in (("system", system, spec.get("system")), ("user", user, spec["user"])):
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None} if any(
                "{" + s_ + "}" in text for s_ in slots) else set()
        except ValueError as e:
            raise RecipematchError(f"{sidecar.parent / key}: cannot be formatted ({e}); write literal braces as "
                                   "{{ and }}") from None
        stray = sorted(fields - slots)
        if stray:
            raise RecipematchError(f"{sidecar.parent / key}: uses {{{stray[0]}}}, which is not a declared slot "
                                   f"(slots: {sorted(slots)}); write literal braces as {{{{ and }}}}")
    missing = sorted(s_ for s_ in slots if "{" + s_ + "}" not in system and "{" + s_ + "}" not in user)
    if missing:
        raise RecipematchError(f"{sidecar}: declared slot(s) {missing} appear in neither prompt text")
    try:
        template = PromptTemplate(name=name, system=system, user=user)
    except ValueError as e:
        raise RecipematchError(f"{sidecar}: {e}") from None
    if template.slots != slots:
        raise RecipematchError(f"{sidecar}: the texts use slots {sorted(template.slots)} but key 'slots' declares "
                               f"{sorted(slots)}")
    if role == "judge":
        if spec.get("answer") not in (None, "judge"):
            raise RecipematchError(f"{sidecar}: a judge answers in the judge schema; key 'answer' must be absent "
                                   "or 'judge'")
        return CustomPrompt(template=template, role=role, schema=None, sidecar=sidecar)
    answer = spec.get("answer")
    if answer is None:
        raise RecipematchError(f"{sidecar}: key 'answer' (the answer schema) is missing; declare at least "
                               "answer.positives")
    if not isinstance(answer, Mapping) or set(answer) - _ANSWER_KEYS:
        raise RecipematchError(f"{sidecar}: key 'answer' must be a mapping with keys {sorted(_ANSWER_KEYS)}")
    if "positives" not in answer:
        raise RecipematchError(f"{sidecar}: key 'answer.positives' is missing (every recipe answer has positives)")
    pos_key, pos_fields = _item_list(answer["positives"], f"{sidecar}: key 'answer.positives'")
    neg_key, neg_fields = (None, ())
    if answer.get("near_misses") is not None:
        neg_key, neg_fields = _item_list(answer["near_misses"], f"{sidecar}: key 'answer.near_misses'")
    top = _names(answer.get("top_fields", []), f"{sidecar}: key 'answer.top_fields'")
    keys = [*top, pos_key] + ([neg_key] if neg_key else [])
    if len(set(keys)) != len(keys):
        raise RecipematchError(f"{sidecar}: key 'answer' uses one field name twice: {keys}")
    if "n_neg" in slots and neg_key is None:
        raise RecipematchError(f"{sidecar}: declares slot n_neg but its answer has no near_misses list")
    schema = PromptSchema(pos_key, neg_key, pos_fields, neg_fields, top)
    return CustomPrompt(template=template, role=role, schema=schema, sidecar=sidecar)
