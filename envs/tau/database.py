"""Domain databases: one read-only pristine copy per process, and a copy-on-write overlay per episode.

Why an overlay: τ-bench reloads the whole database for every episode (and once more for the gold replay).
A deep copy of the airline database takes about 0.2 s and hashing it from scratch about 0.4 s, which is
too slow for thousands of episodes. Instead the pristine database is loaded once per process and never
mutated; an episode's `EpisodeDB` copies a record (one user, order or reservation) the first time a tool
changes it and reads everything else from the pristine copy. An episode's memory is therefore the handful
of records it touched, and its state hash re-hashes only the canonical text after its first changed
record, starting from a cached SHA-256 state; the result is bit-identical to `hashing.state_hash`.

Measured on the 165 original test tasks (gold replay + hash, overlays kept alive): 4.3 KB and 2.8 ms per
episode, at most 6 copied records; the one-off cost per process is loading (0.2 s) and building the hash
caches (0.3 s) of both domains.

Rule for tool code: read with `get`/`values`, and call `mutable` (or `insert`) before changing anything.
"""

from __future__ import annotations

import bisect
import copy
import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from userrl.envs.tau.hashing import canonical_text, pair_text, to_hashable

#: The tables of each domain, in hash (sorted) order; each is a JSON object keyed by record id.
DOMAIN_TABLES: dict[str, tuple[str, ...]] = {
    "retail": ("orders", "products", "users"),
    "airline": ("flights", "reservations", "users"),
}
DOMAINS: tuple[str, ...] = tuple(DOMAIN_TABLES)

PACKAGE_DATA = Path(__file__).resolve().parent / "data"
#: Our own generated retail database (same schema as τ-bench retail).
BUILTIN_RETAIL_DB = PACKAGE_DATA / "retail_db.json"
#: Our own short retail policy, returned by `search policy` when `expose_policy` is on.
BUILTIN_RETAIL_POLICY = PACKAGE_DATA / "retail_policy.md"
#: The folder name of the τ-bench domain data next to the UserRL data folder.
TAU_BENCH_DIRNAME = "tau-bench-data"


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{path} not found: the τ-bench domain folder is incomplete") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object keyed by record id, got {type(value).__name__}")
    return value


def _tuple_bytes(parts: list[bytes]) -> bytes:
    """The text of a tuple from its elements' encoded texts (1-tuples keep the trailing comma)."""
    if len(parts) == 1:
        return b"(" + parts[0] + b",)"
    return b"(" + b", ".join(parts) + b")"


def _record_pair_bytes(key: str, record: Any) -> bytes:
    # Elements inside a tuple are written with repr (str and repr differ only for top-level strings).
    return pair_text(key, repr(to_hashable(record))).encode("utf-8")


class DomainData:
    """A domain's pristine database, loaded once per process and never mutated; with hash caches."""

    def __init__(self, domain: str, tables: dict[str, dict[str, Any]], origin: str, policy_path: Path | None):
        if domain not in DOMAIN_TABLES:
            raise ValueError(f"unknown τ domain {domain!r}; known: {', '.join(DOMAINS)}")
        missing = sorted(set(DOMAIN_TABLES[domain]) - set(tables))
        if missing:
            raise ValueError(f"{origin}: the {domain} database lacks the tables {missing}")
        self.domain = domain
        self.origin = origin
        self.tables = {name: tables[name] for name in DOMAIN_TABLES[domain]}
        self._policy_path = policy_path
        self._lock = threading.Lock()
        self._text: bytes | None = None
        self._spans: dict[str, dict[str, tuple[int, int]]] = {}
        self._checkpoints: dict[int, Any] = {}
        self._sorted_keys: dict[str, list[str]] = {}
        self._fresh_hash: str | None = None
        self._gold_hashes: dict[str, str] = {}

    @classmethod
    def from_tau_bench(cls, root: str | Path, domain: str) -> DomainData:
        """Load `<root>/<domain>/{table}.json` of the τ-bench data folder."""
        folder = Path(root) / domain
        if not folder.is_dir():
            raise FileNotFoundError(
                f"{folder} not found: tau_data_root must point at the τ-bench data folder "
                f"(holding retail/ and airline/)"
            )
        tables = {name: _read_json_object(folder / f"{name}.json") for name in DOMAIN_TABLES[domain]}
        return cls(domain, tables, str(folder), folder / "wiki.md")

    @classmethod
    def from_file(cls, path: str | Path, domain: str, policy_path: Path | None = None) -> DomainData:
        """Load a single JSON file holding every table of the domain (our builtin database)."""
        path = Path(path)
        return cls(domain, _read_json_object(path), str(path), policy_path)

    # ------------------------------------------------------------------ policy text

    def policy(self) -> str | None:
        """The domain policy text, or None when this database ships without one."""
        if self._policy_path is None or not self._policy_path.is_file():
            return None
        return self._policy_path.read_text(encoding="utf-8")

    # ------------------------------------------------------------------ hash caches

    def warm(self) -> None:
        """Build the hash caches now (once per process; about 0.5 s for the airline database).

        The caches are the full canonical text of the pristine database, the byte span of every record's
        (key, record) pair inside it, and a SHA-256 state at every span boundary. An episode's hash then
        resumes from the state just before its first changed record and hashes only the rest of the text.
        """
        if self._text is not None:
            return
        with self._lock:
            if self._text is not None:
                return
            table_parts: list[bytes] = []
            local_spans: dict[str, dict[str, tuple[int, int]]] = {}
            for name in sorted(self.tables):
                table = self.tables[name]
                keys = sorted(table)
                pieces = [_record_pair_bytes(key, table[key]) for key in keys]
                head = pair_text(name, "").encode("utf-8")[:-1]
                body = _tuple_bytes(pieces)
                spans, offset = {}, len(head) + 1  # after "('name', ("
                for key, piece in zip(keys, pieces, strict=True):
                    spans[key] = (offset, offset + len(piece))
                    offset += len(piece) + 2  # the ", " separator
                local_spans[name] = spans
                self._sorted_keys[name] = keys
                table_parts.append(head + body + b")")
            text = _tuple_bytes(table_parts)
            # Shift each table's local spans by the table's position in the whole text.
            offset = 1
            for name, part in zip(sorted(self.tables), table_parts, strict=True):
                self._spans[name] = {k: (offset + a, offset + b) for k, (a, b) in local_spans[name].items()}
                offset += len(part) + 2
            boundaries = sorted(
                {0, *(p for spans in self._spans.values() for span in spans.values() for p in span)}
            )
            view, hasher, cursor = memoryview(text), hashlib.sha256(), 0
            checkpoints = {}
            for boundary in boundaries:
                hasher.update(view[cursor:boundary])
                cursor = boundary
                checkpoints[boundary] = hasher.copy()
            self._checkpoints = checkpoints
            hasher.update(view[cursor:])
            self._fresh_hash = hasher.hexdigest()
            self._text = text

    def record_span(self, table: str, key: str) -> tuple[int, int]:
        """Byte span of a pristine record's (key, record) pair inside the canonical text."""
        self.warm()
        return self._spans[table][key]

    def sorted_keys(self, table: str) -> list[str]:
        """The pristine record ids of a table in hash (code-point) order."""
        self.warm()
        return self._sorted_keys[table]

    def hash_with_edits(self, edits: list[tuple[int, int, bytes]]) -> str:
        """SHA-256 of the canonical text with byte ranges replaced: (start, end, new bytes), any order."""
        self.warm()
        assert self._text is not None
        if not edits:
            assert self._fresh_hash is not None
            return self._fresh_hash
        # Zero-width insertions sort before a replacement that starts at the same offset.
        edits = sorted(edits, key=lambda edit: (edit[0], edit[1]))
        view = memoryview(self._text)
        cursor = edits[0][0]
        hasher = self._checkpoints[cursor].copy()
        for start, end, replacement in edits:
            hasher.update(view[cursor:start])
            hasher.update(replacement)
            cursor = end
        hasher.update(view[cursor:])
        return hasher.hexdigest()

    def fresh_hash(self) -> str:
        """The state hash of the pristine database."""
        self.warm()
        assert self._fresh_hash is not None
        return self._fresh_hash

    def gold_hash(self, actions: list[dict[str, Any]], replay_actions: Callable[[EpisodeDB, list], Any]) -> str:
        """Hash of a fresh copy after `replay_actions` (the tools' replay, which imports this module) ran the gold
        actions; cached per action list (it is deterministic)."""
        key = json.dumps(actions, sort_keys=True, ensure_ascii=True)
        found = self._gold_hashes.get(key)
        if found is None:
            db = EpisodeDB(self)
            replay_actions(db, actions)
            found = db.state_hash()
            if len(self._gold_hashes) >= 65_536:  # bound the cache; every entry is cheap to recompute
                self._gold_hashes.clear()
            self._gold_hashes[key] = found
        return found


class EpisodeDB:
    """One episode's database: the pristine DomainData plus copy-on-write changes to single records."""

    def __init__(self, base: DomainData):
        self.base = base
        self.domain = base.domain
        self._changed: dict[str, dict[str, Any]] = {name: {} for name in base.tables}
        self._added: dict[str, list[str]] = {name: [] for name in base.tables}
        #: Increases on every write access; lets callers cache the state hash between changes.
        self.version = 0
        self._hash_cache: tuple[int, str] | None = None

    def _table(self, table: str) -> dict[str, Any]:
        try:
            return self.base.tables[table]
        except KeyError:
            raise KeyError(table) from None

    # ------------------------------------------------------------------ reads (never mutate the result)

    def contains(self, table: str, key: Any) -> bool:
        """Whether the record exists (raises TypeError for unhashable keys, like a dict would)."""
        return key in self._changed[table] or key in self._table(table)

    def get(self, table: str, key: Any) -> Any:
        """The current record (KeyError with the key when absent). Read-only: call `mutable` to change it."""
        changed = self._changed[table]
        if key in changed:
            return changed[key]
        return self._table(table)[key]

    def keys(self, table: str) -> Iterator[str]:
        """Record ids in file order, then records inserted in this episode."""
        yield from self._table(table)
        yield from self._added[table]

    def values(self, table: str) -> Iterator[Any]:
        """Current records in file order, then inserted records. Read-only."""
        for key in self.keys(table):
            yield self.get(table, key)

    # ------------------------------------------------------------------ writes

    def mutable(self, table: str, key: Any) -> Any:
        """The episode's own copy of a record, made on first write access (KeyError when absent)."""
        self.version += 1
        changed = self._changed[table]
        if key not in changed:
            changed[key] = copy.deepcopy(self._table(table)[key])
        return changed[key]

    def insert(self, table: str, key: str, record: Any) -> None:
        """Store a record; an existing id keeps its position (as assigning into a dict would)."""
        self.version += 1
        if not self.contains(table, key):
            self._added[table].append(key)
        self._changed[table][key] = record

    # ------------------------------------------------------------------ hashing and inspection

    @property
    def touched_records(self) -> int:
        """How many records this episode holds its own copy of."""
        return sum(len(c) for c in self._changed.values())

    def state_hash(self) -> str:
        """The τ-bench state hash of the current database (same value as hashing.state_hash)."""
        if self._hash_cache is not None and self._hash_cache[0] == self.version:
            return self._hash_cache[1]
        digest = self.base.hash_with_edits(self._edits())
        self._hash_cache = (self.version, digest)
        return digest

    def _edits(self) -> list[tuple[int, int, bytes]]:
        """This episode's differences from the pristine canonical text, as byte-range replacements."""
        edits = []
        for name, changed in self._changed.items():
            added = set(self._added[name])
            for key, record in changed.items():
                if key not in added:
                    start, end = self.base.record_span(name, key)
                    edits.append((start, end, _record_pair_bytes(key, record)))
            if not added:
                continue
            keys = self.base.sorted_keys(name)
            if not keys:
                raise NotImplementedError(f"inserting into the empty table {name!r} is not supported")
            if len(keys) == 1:
                # A 1-tuple is written "(x,)": once it grows, its trailing comma goes.
                end = self.base.record_span(name, keys[0])[1]
                edits.append((end, end + 1, b""))
            for key in sorted(added):
                piece = _record_pair_bytes(key, changed[key])
                index = bisect.bisect_left(keys, key)
                if index < len(keys):  # goes before the next pristine record: "new, next"
                    start = self.base.record_span(name, keys[index])[0]
                    edits.append((start, start, piece + b", "))
                else:  # after the last record: "last, new"
                    end = self.base.record_span(name, keys[-1])[1]
                    edits.append((end, end, b", " + piece))
        return edits

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """A full plain copy of the current database (slow; for tests and debugging)."""
        return {
            name: {key: copy.deepcopy(self.get(name, key)) for key in self.keys(name)}
            for name in self.base.tables
        }

    def canonical_text(self) -> str:
        """The full canonical text of the current database (slow; for tests and debugging)."""
        return canonical_text(self.to_dict())


_DOMAIN_CACHE: dict[tuple[str, str], DomainData] = {}
_DOMAIN_CACHE_LOCK = threading.Lock()


def tau_bench_domain(root: str | Path, domain: str) -> DomainData:
    """The process-wide pristine τ-bench database of a domain under root (loaded on first use)."""
    key = (domain, str(Path(root).resolve()))
    with _DOMAIN_CACHE_LOCK:
        if key not in _DOMAIN_CACHE:
            _DOMAIN_CACHE[key] = DomainData.from_tau_bench(root, domain)
        return _DOMAIN_CACHE[key]


def builtin_domain(path: str | Path | None = None) -> DomainData:
    """The process-wide pristine copy of our own retail database (or of another file in its format)."""
    path = Path(path) if path is not None else BUILTIN_RETAIL_DB
    key = ("builtin", str(path.resolve()))
    with _DOMAIN_CACHE_LOCK:
        if key not in _DOMAIN_CACHE:
            _DOMAIN_CACHE[key] = DomainData.from_file(path, "retail", BUILTIN_RETAIL_POLICY)
        return _DOMAIN_CACHE[key]


def find_tau_data_root(tau_data_root: str | Path | None, data_root: str | Path | None) -> Path | None:
    """The τ-bench data folder: the explicit path, else `tau-bench-data` beside data_root; None if absent."""
    if tau_data_root is not None:
        return Path(tau_data_root)
    if data_root is not None:
        candidate = Path(data_root).resolve().parent / TAU_BENCH_DIRNAME
        if candidate.is_dir():
            return candidate
    return None


def domain_available(root: Path | None, domain: str) -> bool:
    """Whether root holds every table file of the domain."""
    return root is not None and all((root / domain / f"{t}.json").is_file() for t in DOMAIN_TABLES[domain])
