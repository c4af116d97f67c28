"""A worker of ``serve --workers N`` / ``relay --workers N`` runs the group's
command line less the option that made it a group."""

from ampcap.cli.workers import worker_argv


def test_a_worker_gets_the_command_line_without_workers() -> None:
    assert worker_argv(["serve", "--demo", "--workers", "2", "--listen", "127.0.0.1:0"]) == \
        ["serve", "--demo", "--listen", "127.0.0.1:0"]
    assert worker_argv(["relay", "--workers=4", "--state-dir", "d"]) == ["relay", "--state-dir", "d"]
    # Only the option itself: a value that happens to look like it stays.
    assert worker_argv(["serve", "--manifest", "--workers.toml"]) == ["serve", "--manifest", "--workers.toml"]
