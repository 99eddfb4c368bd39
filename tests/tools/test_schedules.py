"""``tstreams schedules list|cancel`` on a data directory and through a server."""

from __future__ import annotations

from .conftest import Site


def test_schedules_list_and_cancel(site: Site) -> None:
    site.engine.create_stream("orders", partitions=2)
    site.engine.create_stream("other")
    later = site.engine.schedule("orders", [b"a", b"b"], delay=3600, partition=1)
    sooner = site.engine.schedule("other", [b"c"], delay=600)

    rows = site.json("schedules", "list")
    assert [(r["id"], r["stream"], r["partition"], r["items"]) for r in rows] == [
        (sooner, "other", 0, 1), (later, "orders", 1, 2)]
    assert rows[0]["due"].endswith("Z") and rows[0]["in"].startswith(("9m", "10m"))
    assert [r["id"] for r in site.json("schedules", "list", "orders")] == [later]
    assert [r["id"] for r in site.json("schedules", "list", "--limit", "1")] == [sooner]
    assert "orders" in site.ok("schedules", "list").stdout

    assert site.json("schedules", "cancel", str(later)) == [{"id": later, "cancelled": True}]
    again = site.run("schedules", "cancel", str(later))
    assert again.exit_code == 1 and "no pending schedule" in again.stdout
    assert [r["id"] for r in site.json("schedules", "list")] == [sooner]
    bad = site.run("schedules", "cancel", "0")
    assert bad.exit_code == 1 and "InvalidArgument" in bad.stderr + bad.stdout
