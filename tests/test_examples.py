"""What a newcomer copies must work: every command example of README.md, of docs/*.md (``bash``
blocks) and of every ``--help`` epilog.

Each example runs through bash with the console scripts replaced by functions that record their
arguments, so variables, loops and ``$(…)`` expand as they would for the reader. Every recorded
command must parse with the real parser and name only files and folders that exist where the
reader is: shipped with the repository, produced by an earlier example (README's examples first,
then a document's own in order, or the help of the commands a reader uses before, ``PROGRAMS``;
folder names computed by the commands' own code: ``ccc-generate --dry-run`` and ``tta-eval``'s run
naming), or the reader's own data. Examples
that need ImageNet, a GPU or a cluster are recognised by naming them — an absolute path or
``~/…`` (``--imagenet /data/imagenet/val``), a URL, ``--device cuda``, ``--ray-address`` — and are
only parsed and name-checked; so is whatever they produce. A stream or run folder is written by
one definition only (the same again, e.g. with other ``--workers``, resumes it), no example
overwrites a shipped file, and ``tta-eval compare`` is given runs it can put side by side. The slow
test runs the affordable demo-world examples as written.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").glob("*.md"))]
PROGRAMS = ("ccc-calibrate", "ccc-generate", "ccc-mirror", "ccc-verify", "ccc-corruption-grid", "tta-eval")
"""The console scripts, in the order a reader uses them: each one's help examples may use what an
earlier one's made."""
RECORD_END = "\x01"
_STUBS = "\n".join(
    [
        'record() { printf "%s\\0" "$@" >> "$EXAMPLES_LOG"; printf "\\1\\0" >> "$EXAMPLES_LOG"; }',
        *(f'{program}() {{ record {program} "$@"; }}' for program in (*PROGRAMS, "pip")),
        # python -c prints a path in the examples (the demo image folder): an absolute path of the reader's
        'python() { record python "$@"; if [ "$1" = -c ]; then echo /home/reader/.cache/ccc/demo/images-v1; fi; }',
        'scripts/cluster/paper_streams.sh() { record paper_streams.sh "$@"; '
        'echo "--stream ccc:$1/baseline_20_transition+speed_2000_seed_43"; }',
        "set -u",
    ]
)


@dataclass(frozen=True)
class Example:
    """One block of example commands: where it is written, and its text as a reader pastes it."""

    where: str
    script: str


@dataclass
class Produced:
    """What earlier examples made: path → (kind: file, stream, run or sweep; whether only with the
    reader's own data; for runs and sweeps their (stream name, method labels)), and path → the
    definitions that wrote it."""

    paths: dict[str, tuple[str, bool, object]] = field(default_factory=dict)
    writers: dict[str, list[str]] = field(default_factory=dict)

    def copy(self) -> Produced:
        return Produced(dict(self.paths), {key: list(value) for key, value in self.writers.items()})


def markdown_examples(path: Path) -> list[Example]:
    """The ``bash`` blocks of a markdown file."""
    text = path.read_text()
    blocks = re.finditer(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    return [
        Example(f"{path.relative_to(REPOSITORY)}:{text[: block.start()].count(chr(10)) + 1}", block.group(1))
        for block in blocks
    ]


@functools.cache
def _parsers() -> dict[str, argparse.ArgumentParser]:
    from ccc.cli import calibrate, corruption_grid, generate, mirror, verify
    from tta_eval import cli

    return {
        "ccc-generate": generate.build_parser(),
        "ccc-verify": verify.build_parser(),
        "ccc-mirror": mirror.build_parser(),
        "ccc-calibrate": calibrate.build_parser(),
        "ccc-corruption-grid": corruption_grid.build_parser(),
        "tta-eval": cli.build_parser(),
    }


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    actions = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return [parser, *(sub for action in actions for sub in dict.fromkeys(action.choices.values()))]


def epilog_examples() -> list[Example]:
    """The examples of every ``--help`` (a program's and its subcommands'), one block per program."""
    found = []
    for program in PROGRAMS:
        commands: list[str] = []
        for each in _subparsers(_parsers()[program]):
            lines = (each.epilog or "").split("\n")
            if "examples:" not in lines:
                continue
            for line in lines[lines.index("examples:") + 1 :]:
                if not line.strip():
                    break
                if not line.strip().startswith("#"):
                    commands.append(line.strip())
        found.append(Example(f"{program} --help", "\n".join(dict.fromkeys(commands))))
    return found


def recorded_commands(example: Example, folder: Path) -> list[list[str]]:
    """The commands ``example`` runs, as argument lists, from bash with the programs stubbed."""
    log = folder / "commands.log"
    log.unlink(missing_ok=True)
    log.touch()
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", _STUBS + "\n" + example.script],
        cwd=folder, env={"PATH": os.environ["PATH"], "HOME": "/home/reader", "EXAMPLES_LOG": str(log)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0 and not result.stderr, (
        f"{example.where}: bash cannot run it as written: {result.stderr.strip()}"
    )
    commands, current = [], []
    for part in log.read_text().split("\0")[:-1]:
        if part == RECORD_END:
            commands.append(current)
            current = []
        else:
            current.append(part)
    return commands


def _external(value: str) -> bool:
    """A path of the reader's own (ImageNet, weights, a cluster's shared folder), a URL or a published
    stream (read over the network)."""
    return value.startswith(("/", "~", "published:")) or "://" in value


EXECUTION_OPTIONS = ("workers", "ray_address", "gpus_per_task", "no_progress", "num_workers", "verbose")
"""Options that say where and how fast a command runs: a re-run with others resumes the same folder."""


def _definition(namespace: argparse.Namespace) -> str:
    """What a command makes a folder of: its parsed options (defaults included), execution options aside."""
    return repr(
        sorted(
            (key, value)
            for key, value in vars(namespace).items()
            if key not in EXECUTION_OPTIONS and not callable(value)
        )
    )


def _weights_file(value: str | None) -> str | None:
    """``--weights`` when it names a file (a torchvision weights name such as DEFAULT does not)."""
    return value if value is not None and ("/" in value or "." in value) else None


def _link_shipped(folder: Path) -> None:
    """The reader works in the repository's root: its shipped folders the examples name, in ``folder``."""
    for shipped in ("calibration", "scripts"):
        (folder / shipped).symlink_to(REPOSITORY / shipped)


@contextlib.contextmanager
def _working_folder(folder: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def _parse(parser: argparse.ArgumentParser, arguments: list[str], where: str) -> argparse.Namespace:
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            return parser.parse_args(arguments)
    except SystemExit:
        raise AssertionError(
            f"{where}: {shlex.join(arguments)!r} does not parse: {errors.getvalue().strip()}"
        ) from None


class Checker:
    """Checks examples in order against what exists and what earlier examples made (``produced``, updated)."""

    def __init__(self, produced: Produced, folder: Path) -> None:
        self.produced = produced
        self.folder = folder
        self.parsers = _parsers()
        _link_shipped(folder)

    def check(self, example: Example) -> None:
        for command in recorded_commands(example, self.folder):
            program, arguments = command[0], command[1:]
            where = f"{example.where}: {shlex.join(command)}"
            if program in ("pip", "paper_streams.sh") or (program == "python" and arguments[:1] in (["-c"], ["-m"])):
                continue
            if program == "python":
                self._demo_report(arguments, where)
                continue
            namespace = _parse(self.parsers[program], arguments, where)
            external = (
                any(_external(value) for value in arguments)
                or "--ray-address" in arguments
                or any(value.startswith("cuda") for value in arguments)
            )
            getattr(self, "_" + program.replace("-", "_"))(namespace, arguments, external, where)

    # --- what each program uses and makes ---

    def _use(self, value: str | None, where: str, kind: str = "file") -> bool:
        """Whether ``value`` is the reader's own (True); fails unless it is shipped or made earlier."""
        if value is None or _external(value):
            return value is not None
        if value in self.produced.paths:
            return self.produced.paths[value][1]
        assert (REPOSITORY / value).exists(), (
            f"{where}: {value} ({kind}) is neither shipped nor made by an earlier example"
        )
        return False

    def _make(
        self, path: str | Path, kind: str, external: bool, where: str, extra: object = None, definition: str = ""
    ) -> None:
        path = os.path.normpath(path)
        assert not (REPOSITORY / path).is_file(), f"{where}: overwrites {path}, shipped with the repository"
        writers = self.produced.writers.setdefault(path, [])
        command = definition or where.split(": ", 1)[1]
        if kind in ("run", "sweep", "stream") and writers and command not in writers:
            raise AssertionError(f"{where}: writes {path}, the {kind} folder of an earlier example with other options")
        writers.append(command)
        self.produced.paths[path] = (kind, external, extra)

    def _ccc_generate(self, namespace: argparse.Namespace, arguments: list[str], external: bool, where: str) -> None:
        from ccc.calibration.presets import RESNET50_DIFFICULTY_PRESETS
        from ccc.cli import generate
        from ccc.stream.spec import run_name

        uses_table = namespace.kind == "ccc" and not namespace.demo
        table = namespace.calibration or (str(generate.DEFAULT_CALIBRATION) if uses_table else None)
        external |= (
            self._use(table, where, "calibration table")
            | self._use(namespace.imagenet, where)
            | self._use(namespace.classes, where)
        )
        if uses_table and not (self.folder / table).is_file():
            # the ResNet-50 table, imported by an earlier example: named as ccc-generate names it
            name = namespace.name or run_name(
                RESNET50_DIFFICULTY_PRESETS[namespace.difficulty].target_accuracy, namespace.speed, namespace.seed
            )
            if not namespace.dry_run:
                self._make(Path(namespace.out) / name, "stream", True, where, definition=_definition(namespace))
            return
        if (
            namespace.kind == "cin-c"
            and namespace.images_per_domain is None
            and namespace.imagenet
            and _external(namespace.imagenet)
        ):
            return  # named by the image count of the reader's folder, which --dry-run lists
        out = io.StringIO()
        with (
            _working_folder(self.folder),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(io.StringIO()) as errors,
        ):
            code = generate.main([*arguments, *([] if namespace.dry_run else ["--dry-run"]), "--no-progress"])
        assert code == 0, f"{where}: its --dry-run fails: {errors.getvalue().strip()}"
        folder = re.search(r"^run folder: (.+) \(nothing written there by --dry-run\)$", out.getvalue(), re.MULTILINE)
        assert folder, f"{where}: no run folder in its --dry-run"
        if not namespace.dry_run:
            self._make(folder.group(1), "stream", external, where, definition=_definition(namespace))

    def _ccc_mirror(self, namespace: argparse.Namespace, arguments: list[str], external: bool, where: str) -> None:
        self._use(namespace.source, where, "stream")
        name = namespace.source.removeprefix("published:") if namespace.source.startswith("published:") else ""
        self._make(Path(namespace.out) / name, "stream", True, where, definition=_definition(namespace))

    def _ccc_verify(self, namespace: argparse.Namespace, arguments: list[str], external: bool, where: str) -> None:
        self._use(namespace.folder, where, "run folder")
        self._use(namespace.calibration, where)
        self._use(namespace.imagenet, where)

    def _ccc_calibrate(self, namespace: argparse.Namespace, arguments: list[str], external: bool, where: str) -> None:
        for option in ("file", "source", "imagenet", "classes"):
            external |= self._use(getattr(namespace, option, None), where)
        external |= self._use(_weights_file(getattr(namespace, "weights", None)), where)
        if getattr(namespace, "out", None) is not None:
            self._make(namespace.out, "file", external, where)

    def _ccc_corruption_grid(
        self, namespace: argparse.Namespace, arguments: list[str], external: bool, where: str
    ) -> None:
        self._use(None if namespace.image is None else str(namespace.image), where)
        self._make(namespace.out, "file", external, where)

    def _tta_eval(self, namespace: argparse.Namespace, arguments: list[str], external: bool, where: str) -> None:
        if namespace.command in ("run", "sweep"):
            self._tta_eval_run(namespace, external, where)
        elif namespace.command == "compare":
            self._compare([str(path) for path in namespace.runs], where)
            self._make(namespace.out, "file", False, where)
        elif namespace.command == "rescore":
            for path in namespace.runs:
                assert self._runs_named(str(path), where), (
                    f"{where}: {path} is no run folder made by an earlier example"
                )
            if namespace.json is not None:
                self._make(namespace.json, "file", False, where)

    def _stream_uses(self, stream: str, where: str) -> bool:
        scheme, _, location = stream.partition(":")
        if scheme == "ccc":
            return self._use(location, where, "stream")
        if scheme == "ccc-render":
            parts = location.split(",")
            external = any(
                self._use(part.split("=", 1)[1], where)
                for part in parts
                if part.startswith(("calibration=", "imagenet="))
            )
            folders = [part for part in parts if "=" not in part and part != "demo"]
            return external | any(self._use(folder, where, "stream") for folder in folders)
        if scheme == "synthetic":
            return False
        return self._use(stream, where, "image folder")

    def _tta_eval_run(self, namespace: argparse.Namespace, external: bool, where: str) -> None:
        from ccc.demo import DEMO_METHODS
        from tta_eval.cli import options, run
        from tta_eval.protocols import OfflineProtocol
        from tta_eval.streams import describe_stream_source

        external |= self._use(_weights_file(namespace.weights), where) | self._use(
            getattr(namespace, "classes", None), where
        )
        for each in options.per_stream(namespace):
            stream_external = external | self._stream_uses(each.stream, where)
            protocol = (
                run.protocol_settings(each)
                if namespace.command == "run"
                else OfflineProtocol(**options.episode_settings(each))
            )
            settings = options.experiment_settings(each, protocol)
            try:
                name = settings.resolved_run_name()
                stream_name = describe_stream_source(each.stream, settings.stream_options).name
            except ValueError:
                assert stream_external, f"{where}: tta-eval cannot name its run folder"
                continue  # a stream of the reader's own data, named when it is read
            labels = (
                [method.label for method in settings.resolved_methods()] if settings.methods else list(DEMO_METHODS)
            )
            kind = "sweep" if namespace.command == "sweep" else "run"
            self._make(
                Path(namespace.out) / name, kind, stream_external, where, (stream_name, labels), _definition(each)
            )

    def _runs_named(self, pattern: str, where: str) -> list[str]:
        """The runs (and sweeps) made earlier that ``pattern`` names: a run folder, a folder holding
        some, or a glob of either (``*`` within one path component, as the shell's)."""
        pattern = os.path.normpath(pattern)
        runs = [path for path, (kind, _, _) in self.produced.paths.items() if kind in ("run", "sweep")]
        parts = pattern.split("/")

        def named(path: str) -> bool:
            components = path.split("/")
            return len(components) >= len(parts) and all(
                fnmatch.fnmatchcase(text, part) for text, part in zip(components, parts)
            )

        return [path for path in runs if named(path)]

    def _compare(self, patterns: list[str], where: str) -> None:
        cells: dict[tuple[str, str], str] = {}
        for pattern in patterns:
            runs = self._runs_named(pattern, where)
            assert runs, f"{where}: {pattern} names no run folder made by an earlier example"
            for run in dict.fromkeys(runs):
                kind, _, (stream, labels) = self.produced.paths[run]
                assert kind != "sweep", (
                    f"{where}: {pattern} holds the sweep {run}, whose scenario runs compare cannot mix"
                )
                for label in labels:
                    other = cells.setdefault((stream, label), run)
                    assert other == run, f"{where}: compare refuses {other} and {run}, both with {label} on {stream}"

    def _demo_report(self, arguments: list[str], where: str) -> None:
        assert arguments and arguments[0] == "scripts/demo_report.py", f"{where}: no checker for this script"
        sys.path.insert(0, str(REPOSITORY / "scripts"))
        try:
            import demo_report
        finally:
            sys.path.remove(str(REPOSITORY / "scripts"))
        namespace = _parse(demo_report.build_parser(), arguments[1:], where)
        for text in namespace.stream:
            self._use(text.partition("=")[2], where, "stream")
        for text in namespace.results:
            for path in text.partition("=")[2].split(","):
                assert self._runs_named(path, where), f"{where}: {path} is no run folder made by an earlier example"


@pytest.fixture(scope="module")
def readme_products(tmp_path_factory: pytest.TempPathFactory) -> Produced:
    checker = Checker(Produced(), tmp_path_factory.mktemp("readme"))
    for example in markdown_examples(REPOSITORY / "README.md"):
        checker.check(example)
    return checker.produced


@pytest.mark.parametrize("document", [path.name for path in DOCUMENTS[1:]])
def test_document_examples_parse_and_name_what_exists(document: str, readme_products: Produced, tmp_path: Path) -> None:
    checker = Checker(readme_products.copy(), tmp_path)
    for example in markdown_examples(REPOSITORY / "docs" / document):
        checker.check(example)


def test_help_examples_parse_and_name_what_exists(readme_products: Produced, tmp_path: Path) -> None:
    checker = Checker(readme_products.copy(), tmp_path)
    for example in epilog_examples():
        checker.check(example)


CHEAP_HELP_EXAMPLES = (
    "ccc-calibrate info calibration/demo.npz",
    "ccc-generate --demo --difficulty hard --dry-run --plot hard.png",
    "ccc-corruption-grid",
    "ccc-corruption-grid --holdout --seed 1",
    "tta-eval methods",
    "tta-eval methods 'e*a'",
)
"""The help examples that take seconds; the others render or evaluate streams of minutes."""


def _run_as_written(script: str, folder: Path) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-euc", script],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1800,
    )


@pytest.mark.slow
def test_affordable_examples_run_as_written(tmp_path: Path) -> None:
    """The cheap help examples, and docs/generator.md's CCC-next-to-CIN-C sequence (3,000 32×32 images of
    each, two runs of three methods, their comparison), run as a reader pastes them: about 2 min on two
    cores."""
    _link_shipped(tmp_path)
    written = "\n".join(example.script for example in epilog_examples())
    for command in CHEAP_HELP_EXAMPLES:
        assert command in written.splitlines(), f"{command!r} is no longer a help example"
        result = _run_as_written(command, tmp_path)
        assert result.returncode == 0, f"{command}: {result.stderr}"
    assert (tmp_path / "hard.png").is_file() and (tmp_path / "corruption_grid.png").is_file()

    (sequence,) = [
        example
        for example in markdown_examples(REPOSITORY / "docs" / "generator.md")
        if "--name demo_medium_3000" in example.script
    ]
    result = _run_as_written(sequence.script, tmp_path)
    assert result.returncode == 0, f"{sequence.where}: {result.stderr}"
    table = (tmp_path / "comparison" / "comparison.md").read_text()
    assert "demo_medium_3000" in table and "demo_cifar_cin-c_severity_5_images_200_crop_whole_seed_43" in table
