//! The self-describing schema: a session storing a class stores its fields' names and types
//! (class descriptor format 2), a declaration is matched against them where the stored class
//! has them, and a class stored before descriptors named their fields (format 1, every older
//! database) is read and written as before, matched on its layout alone.

use std::sync::Arc;

use thor_client::{Class, ClientError, PolicyConfig, SCHEMA_SLOT, Session, SessionConfig};
use thor_core::le::{put_u32, u16_at};
use thor_core::{
    ClassDesc, FieldKind, Oref, PageView, RawRef, Scalar, VarElem, builtin, class::CLASS_FORMAT,
};
use thor_net::{ClientConfig, LocalTransport};
use thor_server::{CommitRequest, Engine, EngineOptions};
use thor_storage::MemDisk;

/// What the first program stored.
mod v1 {
    use thor_client::{Ref, Str};

    thor_client::class! {
        /// A person, with every kind of field.
        pub class Person("test.Person") {
            age: u32,
            weight: u64,
            name: Ref<Str>,
            friend: Option<Ref<Person>>,
            score: Option<f32>,
            initials: [u8; 3],
            active: bool,
        }
        var refs<Person>;
    }
}

/// The same layout with `weight` of another type.
mod retyped {
    use thor_client::{Ref, Str};

    thor_client::class! {
        /// `weight` declared signed: the same bytes, another meaning.
        pub class Person("test.Person") {
            age: u32,
            weight: i64,
            name: Ref<Str>,
            friend: Option<Ref<Person>>,
            score: Option<f32>,
            initials: [u8; 3],
            active: bool,
        }
        var refs<Person>;
    }
}

fn server() -> Arc<Engine> {
    let opts =
        EngineOptions { page_size: 8192, background_flusher: false, ..EngineOptions::default() };
    Arc::new(Engine::create(Arc::new(MemDisk::new()), opts).unwrap())
}

fn session(h: &Arc<Engine>) -> Session {
    let t = LocalTransport::connect(h.clone(), &ClientConfig::default()).unwrap();
    let config =
        SessionConfig { cache_bytes: 1 << 20, policy: PolicyConfig::HAC, ..Default::default() };
    Session::new(Box::new(t), config).unwrap()
}

/// The object at `o` as the server stores it.
fn stored(h: &Engine, o: Oref) -> Vec<u8> {
    let page = h.fetch(o.page().unwrap()).unwrap();
    PageView::parse(&page).unwrap().object(o.oid()).unwrap().to_vec()
}

/// The class object the database stores under `name`, decoded from the server's bytes.
fn stored_class_object(h: &Engine, name: &str) -> (Vec<u8>, ClassDesc) {
    let root = stored(h, builtin::ROOT);
    let refs = builtin::desc(builtin::REFS).unwrap();
    let word = |obj: &[u8], k: usize| {
        let w = thor_core::le::u32_at(obj, refs.var_offset() + 4 * k);
        match RawRef::decode(w) {
            RawRef::Oref(o) => o,
            RawRef::Tagged(_) => panic!("a stored reference is an oref"),
        }
    };
    let dir = stored(h, word(&root, SCHEMA_SLOT));
    let n = thor_core::le::u32_at(&dir, refs.count_offset()) as usize;
    (0..n)
        .map(|k| {
            let obj = stored(h, word(&dir, k));
            let desc = ClassDesc::from_class_object(&obj).unwrap();
            (builtin::meta_desc().var_bytes(&obj).to_vec(), desc)
        })
        .find(|(_, d)| d.name() == name)
        .expect("the class is stored")
}

/// Stores a person named Ada, 36, in root slot 0.
fn store_ada(s: &Session) {
    let name = s.create_str("Ada").unwrap();
    let p = s.create::<v1::Person>(0).unwrap();
    p.set(v1::Person::age, 36).unwrap();
    p.set(v1::Person::weight, 60).unwrap();
    p.set(v1::Person::name, name).unwrap();
    p.set(v1::Person::initials, *b"AAL").unwrap();
    let p = p.as_ref();
    s.set_root(0, p).unwrap();
    s.commit().unwrap();
}

#[test]
fn stored_classes_name_their_fields() {
    let h = server();
    store_ada(&session(&h));

    // The server's bytes: format 2, every field with its name, type and offset.
    let (payload, desc) = stored_class_object(&h, "test.Person");
    assert_eq!(u16_at(&payload, 0), CLASS_FORMAT);
    let fields: Vec<(String, String, usize)> =
        desc.fields().map(|(n, k, o)| (n.to_owned(), k.to_string(), o)).collect();
    let want = [
        ("age", "u32", 4),
        ("weight", "u64", 8),
        ("name", "str", 16),
        ("friend", "Option<ref>", 20),
        ("score", "Option<f32>", 24),
        ("initials", "[u8; 3]", 32),
        ("active", "bool", 36),
    ];
    let want: Vec<(String, String, usize)> =
        want.iter().map(|(n, k, o)| (n.to_string(), k.to_string(), *o)).collect();
    assert_eq!(fields, want);
    assert_eq!(desc.var_elem(), Some(VarElem::Ref));
    // The offsets are the ones the declaration reads.
    assert_eq!(v1::Person::weight.offset(), 8);
    assert_eq!(v1::Person::active.offset(), 36);
    // The library's own classes name theirs too.
    let (_, str_class) = stored_class_object(&h, "thor.Str");
    assert!(str_class.has_fields());
    assert_eq!(str_class.var_elem(), Some(VarElem::Byte));

    // A new session sees the same descriptor and reads through it.
    let s = session(&h);
    assert_eq!(s.stored_class::<v1::Person>().unwrap().unwrap(), desc);
    let p = s.get(s.root::<v1::Person>(0).unwrap()).unwrap();
    assert_eq!(p.get(v1::Person::age), 36);
    assert_eq!(p.get_str(v1::Person::name).unwrap(), "Ada");
    let kinds: Vec<FieldKind> = desc.fields().map(|(_, k, _)| k).collect();
    assert_eq!(kinds[1], FieldKind::Scalar(Scalar::U64));
}

#[test]
fn a_declared_field_of_another_type_is_a_schema_mismatch() {
    let h = server();
    store_ada(&session(&h));
    let s = session(&h);
    // The layouts agree (the same sizes and reference slots): only the names and types tell.
    assert_eq!(
        retyped::Person::desc().without_fields(),
        v1::Person::desc().without_fields(),
        "the same layout"
    );
    let reading = s.get(s.root::<retyped::Person>(0).unwrap()).map(drop).unwrap_err();
    let creating = s.create::<retyped::Person>(0).map(drop).unwrap_err();
    for err in [reading, creating] {
        match &err {
            ClientError::SchemaMismatch { class: "test.Person", reason } => {
                assert!(
                    reason.contains("weight: u64") && reason.contains("weight: i64"),
                    "{reason}"
                )
            }
            other => panic!("expected a schema mismatch, got {other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains("at byte 8"), "{message}");
    }
}

/// Builds, through the engine alone, what a thor before the schema section stored: the class
/// `test.Person` as a format-1 descriptor (no field names) in the schema directory, and one
/// person (age 41, weight 70) in root slot 0.
fn old_database() -> Arc<Engine> {
    let h = server();
    let old = v1::Person::desc().without_fields();
    let class_object = old.to_class_object();
    assert_eq!(u16_at(builtin::meta_desc().var_bytes(&class_object), 0), 1, "format 1");
    let refs = builtin::desc(builtin::REFS).unwrap();
    let mut dir = refs.new_object(builtin::REFS.raw(), 1);
    put_u32(&mut dir, refs.var_offset(), RawRef::tagged_word(0));
    let mut person = old.new_object(RawRef::tagged_word(0), 0);
    put_u32(&mut person, v1::Person::age.offset(), 41);
    thor_core::le::put_u64(&mut person, v1::Person::weight.offset(), 70);
    let mut root = stored(&h, builtin::ROOT);
    put_u32(&mut root, refs.var_offset(), RawRef::tagged_word(2));
    put_u32(&mut root, refs.var_offset() + 4 * SCHEMA_SLOT, RawRef::tagged_word(1));
    let created = vec![class_object, dir, person];
    h.commit(CommitRequest { versions: vec![(builtin::ROOT, root)], created }).unwrap();
    h
}

#[test]
fn an_old_descriptor_without_field_names_still_opens() {
    let h = old_database();
    let s = session(&h);
    // The stored class is the old one, without names; the declaration is matched on its
    // layout alone, as before the schema section.
    let stored = s.stored_class::<v1::Person>().unwrap().unwrap();
    assert!(!stored.has_fields());
    assert_eq!(stored.fields().count(), 0);
    assert!(stored.extends(&v1::Person::desc()));
    // Even a declaration whose names or types the old class cannot check opens it.
    assert!(stored.extends(&retyped::Person::desc()));

    // Read, write, and create instances.
    let p = s.get(s.root::<v1::Person>(0).unwrap()).unwrap();
    assert_eq!(p.get(v1::Person::age), 41);
    assert_eq!(p.get(v1::Person::weight), 70);
    p.set(v1::Person::age, 42).unwrap();
    drop(p);
    let q = {
        let q = s.create::<v1::Person>(0).unwrap();
        q.set(v1::Person::age, 7).unwrap();
        q.as_ref()
    };
    s.get(s.root::<v1::Person>(0).unwrap()).unwrap().set(v1::Person::friend, Some(q)).unwrap();
    s.commit().unwrap();
    drop(s);

    // The database keeps its old class (it is read, not rewritten: classes are immutable),
    // and another session reads what was written.
    let (payload, desc) = stored_class_object(&h, "test.Person");
    assert_eq!(u16_at(&payload, 0), 1);
    assert!(!desc.has_fields());
    let s = session(&h);
    let p = s.get(s.root::<v1::Person>(0).unwrap()).unwrap();
    assert_eq!(p.get(v1::Person::age), 42);
    let friend = p.get(v1::Person::friend).expect("set");
    assert_eq!(s.get(friend).unwrap().get(v1::Person::age), 7);
    // A class the old database did not have is stored with its names.
    let _ = s.create_str("new").unwrap();
    s.commit().unwrap();
    let (payload, _) = stored_class_object(&h, "thor.Str");
    assert_eq!(u16_at(&payload, 0), CLASS_FORMAT);
}
