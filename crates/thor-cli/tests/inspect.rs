//! `thor inspect` end to end: on OO7 small (roots, classes counted as the generator counts
//! them, an atomic part's fields by name, following references), on a map of 100,000
//! entries (paging with `--from` and `--limit` in key order, `--json`), through a running
//! server (the same documents as offline), and after a crash (the committed state, and not a
//! byte of the directory changed).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use serde_json::Value;
use thor::{Map, Ref, Seq, Str};

fn inspect(args: &[&str]) -> Output {
    let mut cmd = common::thor();
    cmd.arg("inspect").args(args).env_remove("THOR_TOKEN");
    cmd.output().expect("thor runs")
}

/// `thor inspect ARGS --json`, which must succeed: its document.
fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = inspect(&all);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON document on stdout")
}

/// `thor inspect ARGS`, which must fail: its error line.
fn error(args: &[&str]) -> String {
    let out = inspect(args);
    assert!(
        !out.status.success(),
        "{args:?} should fail: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The field `name` of an `object` document.
fn field<'v>(obj: &'v Value, name: &str) -> &'v Value {
    obj["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no field {name} in {obj:#}"))
}

/// Every file of `dir` with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect()
}

#[test]
fn inspect_shows_oo7_small_roots_classes_fields_and_follows_references() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("oo7");
    let dir = db.to_str().unwrap();
    let out = common::thor()
        .args(["oo7", "load", "--size", "small", "--json", "--dir", dir])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let load: Value = serde_json::from_slice(&out.stdout).unwrap();

    // Roots: the loader's slots (crates/thor-oo7/src/load.rs) with their classes.
    let roots = json(&[dir, "roots"]);
    let by_name: BTreeMap<&str, &str> = roots["roots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["class"].as_str().unwrap()))
        .collect();
    assert_eq!(by_name["root0"], "thor.Refs");
    assert_eq!(by_name["root1"], "oo7.Params");
    assert_eq!(by_name["root2"], "oo7.Index");
    assert_eq!(by_name["schema"], "thor.Refs");

    // Classes: the generator's counts, class by class, and every object counted once.
    let classes = json(&[dir, "classes"]);
    let count = |name: &str| {
        classes["classes"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap()
            ["objects"]
            .as_u64()
            .unwrap()
    };
    for kind in [
        "Module",
        "Manual",
        "ComplexAssembly",
        "BaseAssembly",
        "CompositePart",
        "Document",
        "AtomicPart",
        "Connection",
    ] {
        assert_eq!(count(&format!("oo7.{kind}")), load["counts"][kind].as_u64().unwrap(), "{kind}");
    }
    assert_eq!(count("oo7.AtomicPart"), 10_000);
    // The loader's objects, plus page 1's five class objects and the root.
    assert_eq!(classes["objects"].as_u64().unwrap(), load["objects"].as_u64().unwrap() + 6);
    assert_eq!(classes["pages"], load["pages"]);
    assert_eq!(classes["unknown_classes"], Value::Array(vec![]));
    let part_class = classes["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "oo7.AtomicPart")
        .unwrap();
    assert_eq!(part_class["format"], 2);
    let names: Vec<&str> = part_class["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["id", "kind", "build_date", "x", "y", "doc_id", "to", "from", "part_of"]);

    // An atomic part, reached by a path from a root, with its fields by name.
    let path = "root0.0.all_bases.0.0.components_priv.0.root_part";
    let part = json(&[dir, "object", path]);
    assert_eq!(part["class"], "oo7.AtomicPart");
    assert!(part["named_fields"].as_bool().unwrap());
    assert!(field(&part, "id")["value"].as_u64().unwrap() >= 1);
    let date = field(&part, "build_date")["value"].as_u64().unwrap();
    assert!((1000..=1999).contains(&date), "build date {date}");
    assert_eq!(field(&part, "kind")["type"], "ref");
    assert_eq!(field(&part, "kind")["target"]["class"], "thor.Bytes");
    assert_eq!(field(&part, "to")["target"]["class"], "thor.Refs");
    assert_eq!(field(&part, "part_of")["target"]["class"], "oo7.CompositePart");

    // Following a reference: by --follow from the part's oref, and by a longer path; the
    // composite part's root part is the part we came from.
    let oref = part["oref"].as_str().unwrap();
    let composite = json(&[dir, "object", oref, "--follow", "part_of"]);
    assert_eq!(composite["oref"], field(&part, "part_of")["value"]);
    assert_eq!(composite["class"], "oo7.CompositePart");
    assert_eq!(field(&composite, "root_part")["value"], part["oref"]);
    let again = json(&[dir, "object", &format!("{path}.part_of.root_part")]);
    assert_eq!(again, part);
    // The part's outgoing connections: a collection of references, then one connection.
    let to = json(&[dir, "object", oref, "--follow", "to"]);
    assert_eq!(to["var"]["kind"], "refs");
    assert_eq!(to["var"]["count"], 3);
    let conn = json(&[dir, "object", oref, "--follow", "to", "--follow", "0"]);
    assert_eq!(conn["class"], "oo7.Connection");
    assert_eq!(field(&conn, "from")["value"], part["oref"]);

    // A byte array's text; a class whose descriptor names no fields (format 1, as the
    // built-in classes and databases written before the schema section): its slots.
    let man = json(&[dir, "object", "root0.0.man"]);
    assert!(field(&man, "title")["text"].as_str().unwrap().starts_with("Manual for module"));
    let text = json(&[dir, "object", "root0.0.man.text"]);
    assert_eq!(text["class"], "thor.Large");
    assert_eq!(text["named_fields"], false);
    let slots: Vec<&str> =
        text["fields"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(slots, ["slot0", "slot1", "slot2", "slot3"]);
    assert!(text["summary"].as_str().unwrap().starts_with("large object of"));

    // The text form names the fields too.
    let out = inspect(&[dir, "object", oref]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("oo7.AtomicPart") && text.contains("  part_of: ref = "), "{text}");

    // Clear errors: not a field, not a reference, an oref that names nothing, not a map.
    assert!(error(&[dir, "object", oref, "--follow", "nope"]).contains("has no field \"nope\""));
    assert!(error(&[dir, "object", oref, "--follow", "x"]).contains("not a reference"));
    assert!(error(&[dir, "object", "999999.3"]).contains("names no object"));
    assert!(error(&[dir, "map", oref]).contains("not a map"));
    assert!(error(&[dir, "object", "banana"]).contains("is not an oref"));
}

thor::class! {
    /// A person with a string, an optional number, a sequence and a map.
    pub class Person("inspect.Person") {
        name: Ref<Str>,
        age: Option<u32>,
        scores: Ref<Seq<u64>>,
        friends: Ref<Map<String, Ref<Person>>>,
    }
}

/// Entries of the big map.
const N: u64 = 100_000;

/// A database with, in root 0, a map of `N` entries `k -> 3k` inserted in a scrambled order;
/// in root 1, a person with a name, a sequence of 5,000 numbers and a map of friends.
fn build_map_database(path: &Path) {
    let db = thor::Database::open(path).unwrap();
    let s = db.session().unwrap();
    let m = s
        .run(|s| {
            let m = s.create_map::<u64, u64>()?;
            s.set_root(0, m)?;
            Ok::<_, thor::ClientError>(m)
        })
        .unwrap();
    // 7,919 is prime to 100,000: k = 7919 i mod N visits every key once, out of order.
    let keys: Vec<u64> = (0..N).map(|i| i * 7919 % N).collect();
    for batch in keys.chunks(10_000) {
        s.run(|s| {
            let v = s.map(m)?;
            for &k in batch {
                v.insert(k, 3 * k)?;
            }
            Ok::<_, thor::ClientError>(())
        })
        .unwrap();
    }
    s.run(|s| {
        let p = s.create_fixed::<Person>()?;
        p.set_str(Person::name, "Ada")?;
        p.set(Person::age, Some(36))?;
        let scores = s.create_seq::<u64>()?;
        s.seq(scores)?.extend_from_slice(&(0..5_000u64).map(|i| i * i).collect::<Vec<_>>())?;
        p.set(Person::scores, scores)?;
        let friends = s.create_map::<String, Ref<Person>>()?;
        s.map(friends)?.insert("self".to_string(), p.as_ref())?;
        p.set(Person::friends, friends)?;
        s.set_root(1, p.as_ref())
    })
    .unwrap();
    drop(s);
    db.close().unwrap();
}

#[test]
fn inspect_pages_a_map_of_100k_entries_in_key_order() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("maps");
    build_map_database(&db);
    let dir = db.to_str().unwrap();
    let keys = |m: &Value| -> Vec<u64> {
        m["entries"].as_array().unwrap().iter().map(|e| e["key"].as_u64().unwrap()).collect()
    };

    // The first page: 50 entries by default, in key order, and where the next page starts.
    let first = json(&[dir, "map", "root0"]);
    assert_eq!(
        (first["key_type"].as_str(), first["value_type"].as_str()),
        (Some("u64"), Some("u64"))
    );
    assert_eq!(keys(&first), (0..50).collect::<Vec<_>>());
    assert!(
        first["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["value"] == 3 * e["key"].as_u64().unwrap())
    );
    assert_eq!(first["next"], 50);

    // Paging: from a key, across many leaves, to the end.
    let page = json(&[dir, "map", "root0", "--from", "40000", "--limit", "2000"]);
    assert_eq!(keys(&page), (40_000..42_000).collect::<Vec<_>>());
    assert_eq!(page["next"], 42_000);
    let last = json(&[dir, "map", "root0", "--from", "99990", "--limit", "100"]);
    assert_eq!(keys(&last), (99_990..N).collect::<Vec<_>>());
    assert_eq!(last["next"], Value::Null);
    let past = json(&[dir, "map", "root0", "--from", "1000000"]);
    assert_eq!(keys(&past), Vec::<u64>::new());
    // Walking the whole map page by page gives every key once, in order.
    let mut seen = Vec::new();
    let mut from = "0".to_string();
    loop {
        let p = json(&[dir, "map", "root0", "--from", &from, "--limit", "30000"]);
        seen.extend(keys(&p));
        match p["next"].as_u64() {
            Some(n) => from = n.to_string(),
            None => break,
        }
    }
    assert_eq!(seen, (0..N).collect::<Vec<_>>());

    // The text form.
    let out = inspect(&[dir, "map", "root0", "--limit", "3"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("  1 => 3\n") && text.contains("more: --from 3"), "{text}");

    // The person: a string, an option, a sequence's length, a map of references.
    let p = json(&[dir, "object", "root1"]);
    assert_eq!(p["class"], "inspect.Person");
    assert_eq!(field(&p, "name")["text"], "Ada");
    assert_eq!(field(&p, "age")["value"], 36);
    assert_eq!(field(&p, "scores")["target"]["summary"], "sequence of 5000 u64");
    assert_eq!(field(&p, "friends")["target"]["summary"], "map String -> Ref");
    let friends = json(&[dir, "map", "root1.friends"]);
    assert_eq!(friends["entries"][0]["key"], "self");
    assert_eq!(friends["entries"][0]["value"], p["oref"]);
    assert_eq!(friends["entries"][0]["target"]["class"], "inspect.Person");
    let seq = json(&[dir, "seq", "root1.scores", "--from", "4990", "--limit", "20"]);
    assert_eq!(seq["len"], 5000);
    let values: Vec<(u64, u64)> = seq["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e[0].as_u64().unwrap(), e[1].as_u64().unwrap()))
        .collect();
    assert_eq!(values, (4990..5000u64).map(|i| (i, i * i)).collect::<Vec<_>>());
    assert_eq!(seq["more"], false);

    // Typed errors.
    assert!(error(&[dir, "seq", "root0"]).contains("not a sequence"));
    assert!(error(&[dir, "map", "root0", "--from", "-3"]).contains("not a key of this map (u64)"));
    assert!(error(&[dir, "object", "root7"]).contains("root slot 7 is empty"));
}

#[test]
fn inspect_through_a_server_matches_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("served");
    build_map_database(&db);
    let dir = db.to_str().unwrap();
    let commands: [&[&str]; 5] = [
        &["roots"],
        &["object", "root1"],
        &["map", "root0", "--from", "777", "--limit", "300"],
        &["seq", "root1.scores", "--limit", "10"],
        &["classes"],
    ];
    let offline: Vec<Value> = commands.iter().map(|c| json(&[&[dir][..], c].concat())).collect();

    let (server, addr, log) = common::start(&db, &[], Some("s3cret"));
    common::drain(log);
    let addr = addr.to_string();
    for (c, want) in commands.iter().zip(&offline) {
        let got = json(&[&["--connect", &addr, "--token", "s3cret"][..], c].concat());
        assert_eq!(&got, want, "{c:?} through the server");
    }
    // A directory a server holds is refused offline, with the way round.
    let e = error(&[dir, "roots"]);
    assert!(e.contains("in use") && e.contains("--connect"), "{e}");
    // A wrong token is refused by the server.
    let e = error(&["--connect", &addr, "--token", "wrong", "roots"]);
    assert!(e.contains(&format!("cannot reach {addr}")), "{e}");
    drop(server);
}

#[test]
fn inspect_after_a_crash_shows_the_committed_state_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("crashed");
    let (server, addr, log) = common::start(&db, &["--create"], None);
    common::drain(log);
    let s = thor::connect(addr, "").unwrap();
    s.run(|s| {
        let m = s.create_map::<String, u64>()?;
        let v = s.map(m)?;
        for i in 0..500u64 {
            v.insert(format!("key{i:04}"), i)?;
        }
        s.set_root(0, m)
    })
    .unwrap();
    drop(s);
    server.kill();

    let before = files(&db);
    let dir = db.to_str().unwrap();
    let m = json(&[dir, "map", "root0", "--from", "key0100", "--limit", "3"]);
    let keys: Vec<&str> =
        m["entries"].as_array().unwrap().iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["key0100", "key0101", "key0102"]);
    assert_eq!(m["next"], "key0103");
    let classes = json(&[dir, "classes"]);
    assert!(classes["classes"].as_array().unwrap().iter().any(|c| c["name"] == "thor.MapNode"));
    assert_eq!(files(&db), before, "inspect changed the directory");
}
