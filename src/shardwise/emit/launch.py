"""What `--emit` hands back: one launch, as data first (environment, launcher, the tool's
arguments, files to write, what was changed and what the user still adds), then as shell text in
which every word is quoted (`shlex.quote`) except the placeholders this module writes itself."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from shardwise.errors import SpecError


class EmitError(SpecError):
    """A plan the target tool cannot run as priced (one line: what, and why)."""


@dataclass(frozen=True)
class Replica:
    """One serving replica's server on its machine (`emit.replicas`): the GPUs it sees (`devices`,
    CUDA_VISIBLE_DEVICES) and its API port; `role` says which replicas run it (the same slot on every
    server)."""

    devices: str
    port: int
    role: str


def unemitted_shape(plan: object, tool: str) -> tuple[dict[str, object], list[str]]:
    """(changes, sentences) for what no training launch here sets: the step's micro-batches as
    several pipeline schedules (`Plan.pipeline_flushes`, NeMo AutoModel's) and packed documents
    (`Plan.packed_document_len`); `tool` runs one schedule a step on whole sequences."""
    new: dict[str, object] = {}
    changes: list[str] = []
    flushes, doc = int(plan.pipeline_flushes), int(plan.packed_document_len)  # type: ignore[attr-defined]
    if flushes > 1 and int(plan.pp) > 1:  # type: ignore[attr-defined]  # one stage: no fill or drain to repeat
        new["pipeline_flushes"] = 1
        changes.append(f"{flushes} pipeline schedules a step -> 1 ({tool} runs a step's micro-batches as one)")
    if doc > 0:
        new["packed_document_len"] = 0
        changes.append(f"packed documents of {doc} tokens -> one document per sequence (packing is not emitted)")
    return new, changes


@dataclass(frozen=True)
class Var:
    """A shell word the user's environment fills in (`"$MASTER_ADDR:$MASTER_PORT"`), written
    inside double quotes so that it expands; `sample` stands in for it where the launch is
    checked without a shell. Only this package makes them, never from user input."""

    text: str
    sample: str

    def __post_init__(self) -> None:
        if any(c in self.text for c in '"`\\\n') or "$(" in self.text:
            raise ValueError(f"placeholder {self.text!r} must be a plain variable reference")


Word = str | Var


def quote(word: Word) -> str:
    return f'"{word.text}"' if isinstance(word, Var) else shlex.quote(word)


def plain(word: Word) -> str:
    return word.sample if isinstance(word, Var) else word


def _text(word: Word) -> str:
    return word.text if isinstance(word, Var) else word


Args = tuple[tuple[Word, ...], ...]


@dataclass(frozen=True)
class Node:
    """One server's command where the servers of a launch run different ones (vLLM's data-parallel
    ranks over several servers): `role` says which server it is and what runs there, `args` what
    it adds to the launch's shared arguments."""

    role: str
    args: Args


@dataclass(frozen=True)
class Launch:
    """One job as the target tool takes it.

    `launcher` starts the processes (torchrun ... script), `args` are the tool's own arguments,
    one group (a flag and its values) per line; `files` are written before the command (name,
    text); `changes` say how the launched plan differs from the plan asked for (it was re-priced),
    `todo` what the user still has to add (data, tokenizer, checkpoints, schedule). `nodes`: one
    command per server, each the shared arguments and its own, where the servers' commands differ
    (none: the one command runs on every server, as torchrun's does)."""

    target: str
    version: str
    launcher: tuple[Word, ...]
    args: Args
    env: tuple[tuple[str, str], ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    changes: tuple[str, ...] = ()
    todo: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    nodes: tuple[Node, ...] = ()
    replicas: tuple[Replica, ...] = ()  # serving replicas of one server: the command once each (`emit.replicas`)

    def node_args(self, node: int = 0) -> Args:
        """The argument groups of server `node`'s command (the shared ones without `nodes`)."""
        return self.args + self.nodes[node].args if self.nodes else self.args

    def argv(self, node: int = 0, samples: bool = True) -> list[str]:
        """The tool's arguments as its parser receives them (placeholders filled with samples; with
        `samples` False as the user passes them, "$HEAD_ADDR"), of server `node`'s command where the
        servers' commands differ (the head's by default)."""
        return [plain(w) if samples else _text(w) for group in self.node_args(node) for w in group]

    def _placeholders(self) -> list[Var]:
        groups = [self.launcher, *self.args, *(g for n in self.nodes for g in n.args)]
        return [w for group in groups for w in group if isinstance(w, Var)]

    def launcher_argv(self) -> list[str]:
        return [plain(w) for w in self.launcher]

    def command(self, node: int = 0, replica: Replica | None = None) -> str:
        """Server `node`'s command as shell text, one argument group a line; of one `replica`: its
        GPUs before it and its port after."""
        command = [" ".join(quote(w) for w in self.launcher)]
        command += [" ".join(quote(w) for w in group) for group in self.node_args(node)]
        if replica is not None:
            command[0] = f"CUDA_VISIBLE_DEVICES={replica.devices} {command[0]}"
            command.append(f"--port {replica.port}")
        return " \\\n    ".join(command)

    def shell(self) -> str:
        lines = [f"# {self.target} ({self.version})"]
        lines += [f"# launched as re-priced: {c}" for c in self.changes]
        lines += [f"# note: {n}" for n in self.notes]
        lines += [f"# you add: {t}" for t in self.todo]
        for name, text in self.files:
            body = text if text.endswith("\n") else text + "\n"
            lines.append(f"cat > {shlex.quote(name)} <<'SHARDWISE_EOF'\n{body}SHARDWISE_EOF")
        exports = [f"export {k}={shlex.quote(v)}" for k, v in self.env]
        if self.replicas:
            lines += exports
            for r in self.replicas:
                lines += [f"# {r.role}", self.command(replica=r)]
            return "\n".join(lines)
        if not self.nodes:
            return "\n".join([*lines, *exports, self.command()])
        for r, node in enumerate(self.nodes):
            lines += [f"# on server {r} of {len(self.nodes)}: {node.role}", *exports, self.command(r)]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "version": self.version,
            "shell": self.shell(),
            "env": dict(self.env),
            "launcher": [quote(w) for w in self.launcher],
            # as the user passes them: a placeholder as its shell text ("$HEAD_ADDR"), which the
            # user's environment fills in (`placeholders`: the sample a check without a shell uses)
            "argv": self.argv(samples=False),
            "placeholders": {w.text: w.sample for w in self._placeholders()},
            # one entry a server where their commands differ; `argv` is the first's
            "nodes": [
                {"node": r, "role": n.role, "argv": self.argv(r, samples=False), "command": self.command(r)}
                for r, n in enumerate(self.nodes)
            ],
            # one entry a replica slot of a server: its GPUs and port (`argv` holds neither)
            "replicas": [
                {"devices": r.devices, "port": r.port, "role": r.role, "command": self.command(replica=r)}
                for r in self.replicas
            ],
            "files": dict(self.files),
            "changes": list(self.changes),
            "notes": list(self.notes),
            "todo": list(self.todo),
        }


MASTER = Var("$MASTER_ADDR:$MASTER_PORT", "127.0.0.1:29500")
JOB_ID = Var("$JOB_ID", "shardwise")


def torchrun(nodes: int, gpus_per_node: int, *rest: Word) -> tuple[Word, ...]:
    """torchrun with one process per GPU on every node; across nodes a c10d rendezvous whose
    endpoint the user's scheduler sets (MASTER_ADDR, MASTER_PORT, JOB_ID)."""
    out: list[Word] = ["torchrun", "--nproc-per-node", str(gpus_per_node), "--nnodes", str(nodes)]
    if nodes > 1:
        out += ["--rdzv-backend", "c10d", "--rdzv-endpoint", MASTER, "--rdzv-id", JOB_ID]
    else:
        out.append("--standalone")
    return (*out, *rest)


def flag_groups(*groups: tuple[Word, ...] | None) -> Args:
    return tuple(g for g in groups if g)
