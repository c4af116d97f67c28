"""``ampcap deleg grant|revoke|show`` and ``invoke --delegation`` against ``ampcap serve``."""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import serve_process  # noqa: E402

PY = sys.executable
ECHO1 = "org.ampcap.demo.echo:1.0.0"


def ampcap(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "config"), XDG_STATE_HOME=str(tmp / "state"))
    return subprocess.run([PY, "-m", "ampcap.cli.main", *args], capture_output=True, text=True, env=env, timeout=60)


def _ids(tmp: Path, *names: str) -> dict[str, str]:
    out = {}
    for name in names:
        assert ampcap(tmp, "keygen", "-o", str(tmp / f"{name}.json")).returncode == 0
        out[name] = ampcap(tmp, "id", "--identity", str(tmp / f"{name}.json")).stdout.strip()
    return out


def test_grant_invoke_revoke_show(tmp_path: Path) -> None:
    did = _ids(tmp_path, "alice", "bob", "carol")
    alice, bob, carol = (str(tmp_path / f"{n}.json") for n in ("alice", "bob", "carol"))
    state = tmp_path / "alice-state"
    grant = ampcap(tmp_path, "deleg", "grant", "--identity", alice, "--to", did["bob"], "--capability",
                   "org.ampcap.demo.echo", "--allow-subdelegation", "--id", "delegation:ab", "--state-dir",
                   str(state), "-o", str(tmp_path / "ab.json"))
    assert grant.returncode == 0, grant.stderr
    assert "granted delegation:ab" in grant.stderr
    sub = ampcap(tmp_path, "deleg", "grant", "--identity", bob, "--to", did["carol"], "--capability", ECHO1,
                 "--parent", str(tmp_path / "ab.json"), "--state-dir", "none")
    assert sub.returncode == 0, sub.stderr
    (tmp_path / "abc.json").write_text(sub.stdout)
    assert len(json.loads(sub.stdout)["chain"]) == 2
    # A link that widens the scope is refused before anything is written.
    wide = ampcap(tmp_path, "deleg", "grant", "--identity", bob, "--to", did["carol"], "--capability",
                  "org.ampcap.demo.noop", "--parent", str(tmp_path / "ab.json"), "--state-dir", "none")
    assert wide.returncode == 1 and "3004" in wide.stderr and wide.stdout == ""
    # Usage mistakes: exit 2, nothing written.
    assert ampcap(tmp_path, "deleg", "grant", "--identity", alice, "--to", did["bob"]).returncode == 2
    assert ampcap(tmp_path, "deleg", "grant", "--identity", alice, "--to", did["bob"], "--capability",
                  "org.ampcap.*").returncode == 2
    assert ampcap(tmp_path, "deleg", "grant", "--to", "bob", "--capability", ECHO1).returncode == 2

    show = ampcap(tmp_path, "deleg", "show", str(tmp_path / "abc.json"), "--capability", ECHO1, "--json")
    assert show.returncode == 0, show.stderr
    report = json.loads(show.stdout)
    assert report["verdict"]["decision"] == "allow" and report["verdict"]["effective_delegator_did"] == did["alice"]
    show = ampcap(tmp_path, "deleg", "show", str(tmp_path / "abc.json"), "--capability",
                  "org.ampcap.demo.echo:2.0.0")
    assert show.returncode == 1 and "DENY 3004" in show.stdout

    with serve_process(tmp_path, "--identity", alice, "--state-dir", str(state)) as daemon:
        ok = ampcap(tmp_path, "invoke", daemon.url, ECHO1, "--params", '{"message": "hi"}', "--identity", carol,
                    "--delegation", str(tmp_path / "abc.json"), "--json")
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["result"]["message"] == "hi"
        wrong = ampcap(tmp_path, "invoke", daemon.url, ECHO1, "--params", '{"message": "hi"}', "--identity", bob,
                       "--delegation", str(tmp_path / "abc.json"))
        assert wrong.returncode == 1 and "3001" in wrong.stderr  # not Bob's chain (A.6)
        # Alice revokes her link into the daemon's state directory: the running daemon sees it.
        rev = ampcap(tmp_path, "deleg", "revoke", "delegation:ab", "--identity", alice, "--state-dir", str(state))
        assert rev.returncode == 0, rev.stderr
        denied = ampcap(tmp_path, "invoke", daemon.url, ECHO1, "--params", '{"message": "hi"}', "--identity",
                        carol, "--delegation", str(tmp_path / "abc.json"))
        assert denied.returncode == 1 and "3004" in denied.stderr, denied.stderr
        assert "a credential in the chain is revoked" in denied.stderr  # what the caller may know (RFC 005 §8)
        missing = ampcap(tmp_path, "invoke", daemon.url, ECHO1, "--identity", carol, "--delegation",
                         str(tmp_path / "nope.json"))
        assert missing.returncode == 1 and "nope.json" in missing.stderr
    # The revocation outlives the daemon: a restart still denies.
    with serve_process(tmp_path, "--identity", alice, "--state-dir", str(state)) as daemon:
        denied = ampcap(tmp_path, "invoke", daemon.url, ECHO1, "--params", '{"message": "hi"}', "--identity",
                        carol, "--delegation", str(tmp_path / "abc.json"))
        assert denied.returncode == 1 and "3004" in denied.stderr


def test_send_and_query(tmp_path: Path) -> None:
    did = _ids(tmp_path, "alice", "bob")
    alice = str(tmp_path / "alice.json")
    grant = ampcap(tmp_path, "deleg", "grant", "--identity", alice, "--to", did["bob"], "--capability", ECHO1,
                   "--id", "delegation:q", "--state-dir", "none", "-o", str(tmp_path / "ab.json"))
    assert grant.returncode == 0, grant.stderr
    with serve_process(tmp_path, "--state-dir", "none") as daemon:
        sent = ampcap(tmp_path, "deleg", "send", daemon.url, str(tmp_path / "ab.json"), "--identity", alice)
        assert sent.returncode == 0, sent.stderr
        assert "credential delegation:q accepted" in sent.stdout
        q = ampcap(tmp_path, "deleg", "query", daemon.url, "delegation:q", "--delegator", did["alice"], "--json",
                   "--identity", alice)
        assert q.returncode == 0, q.stderr
        assert json.loads(q.stdout)["status"] == "active"
        rev = ampcap(tmp_path, "deleg", "revoke", "delegation:q", "--identity", alice, "--state-dir", "none",
                     "-o", str(tmp_path / "rev.json"))
        assert rev.returncode == 0, rev.stderr
        sent = ampcap(tmp_path, "deleg", "send", daemon.url, str(tmp_path / "rev.json"), "--identity", alice)
        assert sent.returncode == 0, sent.stderr
        q = ampcap(tmp_path, "deleg", "query", daemon.url, "delegation:q", "--delegator", did["alice"],
                   "--identity", alice)
        assert q.returncode == 0 and q.stdout.startswith("revoked delegation:q"), q.stdout + q.stderr
        bad = ampcap(tmp_path, "deleg", "send", daemon.url, str(tmp_path / "missing.json"))
        assert bad.returncode == 1 and "missing.json" in bad.stderr
        assert ampcap(tmp_path, "deleg", "query", "nope://x", "id").returncode == 2


def test_grant_refuses_what_it_would_get_wrong(tmp_path: Path) -> None:
    """Issue 38 item 11: a did:key that names no key, a duration without its
    unit, an --out that exists (as keygen: --force replaces it)."""
    did = _ids(tmp_path, "alice", "bob")
    alice = str(tmp_path / "alice.json")
    base = ("deleg", "grant", "--identity", alice, "--capability", ECHO1, "--state-dir", "none")
    bogus = ampcap(tmp_path, *base, "--to", "did:key:bogus")
    assert bogus.returncode == 2 and "'did:key:bogus' is not a valid did:key" in bogus.stderr
    assert bogus.stdout == ""
    bare = ampcap(tmp_path, *base, "--to", did["bob"], "--expires", "1")
    assert bare.returncode == 2 and "'1' has no unit: say 1s, 1m, 1h or 1d" in bare.stderr
    for text, seconds in (("90s", 90), ("1h", 3600), ("30d", 30 * 86400)):
        before = time.time()
        ok = ampcap(tmp_path, *base, "--to", did["bob"], "--expires", text)
        assert ok.returncode == 0, ok.stderr
        until = calendar.timegm(time.strptime(ok.stderr.split(" until ")[1].split()[0], "%Y-%m-%dT%H:%M:%SZ"))
        assert before + seconds - 1 <= until <= time.time() + seconds
    out = tmp_path / "cred.json"
    out.write_text("keep me")
    refused = ampcap(tmp_path, *base, "--to", did["bob"], "--out", str(out))
    assert refused.returncode == 1 and "already exists; pass --force to replace it" in refused.stderr
    assert out.read_text() == "keep me"
    forced = ampcap(tmp_path, *base, "--to", did["bob"], "--out", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert "chain" in json.loads(out.read_text())
    rev_out = tmp_path / "rev.json"
    rev_out.write_text("keep me")
    rev = ampcap(tmp_path, "deleg", "revoke", "d1", "--identity", alice, "--state-dir", "none", "--out", str(rev_out))
    assert rev.returncode == 1 and "already exists" in rev.stderr and rev_out.read_text() == "keep me"
