"""lnav formats for the files nvrx-otel writes, and ``nvrx-otel lnav-install``.

Two format definitions (lnav's JSON format schema) ship as package data in
``lnav_formats/``: ``nvrx_node_log`` for the node log (``nvrx_log_<node id>.log``, the
grammar of :mod:`nvrx_otel.nodeline`) and ``nvrx_logflow_log`` for LogFlow's run file
(what the loguru front end writes). Installing them copies the files to
``<lnav config dir>/formats/installed/``, where ``lnav -i FILE`` puts a format too; lnav
then recognises both kinds of file and makes each a SQL table of the format's name.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final

from nvrx_otel import env

FORMATS: Final = ("nvrx_node_log", "nvrx_logflow_log")
"""The shipped formats: each is ``lnav_formats/<name>.json`` and lnav's table ``<name>``."""

_WHAT: Final = {
    "nvrx_node_log": "the node log, nvrx_log_<node id>.log",
    "nvrx_logflow_log": "LogFlow's run file, <log dir>/<script>.log",
}


def format_text(name: str) -> bytes:
    """The JSON text of one shipped format."""
    return (resources.files("nvrx_otel") / "lnav_formats" / f"{name}.json").read_bytes()


class InstallError(Exception):
    """Installing cannot go on; the message names the problem in one line."""


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The configuration directory lnav (0.11) uses: ``~/.lnav`` if it exists, else
    ``$XDG_CONFIG_HOME/lnav`` if that directory exists, else ``~/.config/lnav`` if
    ``~/.config`` exists, else ``~/.lnav``. Raises :class:`InstallError` without a home
    directory (lnav would then use its working directory)."""
    e = os.environ if environ is None else environ
    home_text = e.get("HOME", "")
    home = Path(home_text)
    if not home_text or not home.is_dir():
        raise InstallError(
            f"no home directory (HOME={home_text!r}) to find lnav's configuration in; "
            "pass --dest DIR"
        )
    dotlnav = home / ".lnav"
    if dotlnav.is_dir():
        return dotlnav
    xdg = e.get(env.XDG_CONFIG_HOME, "")  # raw, not its row's default: lnav's rule, not ours
    if xdg and Path(xdg).is_dir():
        return Path(xdg) / "lnav"
    if (home / ".config").is_dir():
        return home / ".config" / "lnav"
    return dotlnav


@dataclass(frozen=True)
class Installed:
    """One format file written (or found already up to date)."""

    name: str
    path: Path
    changed: bool


def install(dest: Path | None = None, environ: Mapping[str, str] | None = None) -> list[Installed]:
    """Write every shipped format to ``<dest or lnav's config dir>/formats/installed/``
    (each atomically, replacing an older copy). Raises :class:`InstallError`."""
    base = config_dir(environ) if dest is None else dest
    target = base / "formats" / "installed"
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InstallError(f"cannot create {target}: {exc.strerror or exc}") from exc
    done = []
    for name in FORMATS:
        data = format_text(name)
        path = target / f"{name}.json"
        try:
            if path.read_bytes() == data:
                done.append(Installed(name, path, changed=False))
                continue
        except OSError:
            pass
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise InstallError(f"cannot write {path}: {exc.strerror or exc}") from exc
        done.append(Installed(name, path, changed=True))
    return done


_EPILOG: Final = """\
examples:
  nvrx-otel lnav-install
      lnav then reads the files as they are:
      lnav logs/nvrx_log_node001.log
      lnav -n -c ";SELECT log_time, workload_rank, log_body FROM nvrx_node_log
                  WHERE log_level >= 'error'" logs/nvrx_log_node001.log
  nvrx-otel lnav-install --dest /shared/lnav
      a configuration directory of its own, used with: lnav -I /shared/lnav FILE
"""


def build_parser(prog: str = "nvrx-otel lnav-install") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Install lnav formats for the node log (table nvrx_node_log) and LogFlow's\n"
            "run file (table nvrx_logflow_log) into lnav's configuration directory, as\n"
            "'lnav -i FILE' would."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--dest",
        metavar="DIR",
        type=Path,
        help=(
            "an lnav configuration directory to install into (files go to "
            "DIR/formats/installed/; use it with 'lnav -I DIR'); default: the one lnav "
            "uses (~/.lnav, $XDG_CONFIG_HOME/lnav or ~/.config/lnav)"
        ),
    )
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "nvrx-otel lnav-install") -> int:
    """``nvrx-otel lnav-install [--dest DIR]``: 0 when installed, 1 with one line on
    stderr naming the problem otherwise."""
    args = build_parser(prog).parse_args(argv)
    try:
        done = install(args.dest)
    except InstallError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    for item in done:
        verb = "installed" if item.changed else "up to date"
        print(f"{verb}: {item.path} (format {item.name}: {_WHAT[item.name]})")
    if args.dest is not None:
        print(f"use it with: lnav -I {args.dest} FILE...")
    return 0
