//! `thor oo7 cluster` on a tiny database: the modules at two servers answer the same
//! traversal as both at one server, each server serving its own module's pages, and T1's
//! commit spans both servers.

mod common;

use common::thor;

#[test]
fn oo7_split_over_two_servers_visits_what_one_server_visits() {
    let tmp = tempfile::tempdir().unwrap();
    let out = thor()
        .args(["oo7", "cluster", "--size", "tiny", "--runs", "1", "--json"])
        .args(["--traversal", "t1,dynamic", "--over", "embedded", "--dir"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let points: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let points = points.as_array().unwrap();
    assert_eq!(points.len(), 4, "t1 and dynamic, one and two servers");
    let get = |t: &str, servers: u64| {
        points
            .iter()
            .find(|p| p["traversal"] == t && p["servers"].as_u64() == Some(servers))
            .unwrap_or_else(|| panic!("{t} on {servers}"))
    };
    let (one, two) = (get("t1", 1), get("t1", 2));
    assert_eq!(one["parts_visited"], two["parts_visited"], "the same traversal");
    assert!(one["parts_visited"].as_u64().unwrap() > 0);
    let per = two["fetches_per_server"][0].as_array().unwrap();
    assert_eq!(per.len(), 2);
    assert!(per.iter().all(|f| f.as_u64().unwrap() > 0), "each server serves its module: {per:?}");
    assert_eq!(two["two_phase_commits"], 1, "T1 commits at both servers");
    assert_eq!(get("dynamic", 2)["two_phase_commits"], 0, "each operation uses one server");
}
