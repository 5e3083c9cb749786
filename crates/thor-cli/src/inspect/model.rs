//! Decoding what the pages hold: objects with their classes' field names and types, the
//! root slots, the class census, and the built-in collections (`thor.Map`, `thor.Seq`).
//!
//! Everything here reads through [`Pages`] (so one implementation serves the offline and the
//! connected source) and trusts nothing it reads: an object's shape is checked against its
//! class (`ClassDesc::check_shape`) before a field is read, map node entries through
//! `thor_core::mapnode::entry`, a sequence's chunks against the length. A damaged object is
//! [`InspectError::Malformed`], never a panic or a loop.
//!
//! # Classes without field names
//!
//! A class descriptor of format 2 names and types its fields (`ClassDesc::fields`); one of
//! format 1 (a database written before the schema section, and the built-in classes) does
//! not. Such an object is shown slot by slot: `slot N` for each 4-byte word of its fixed part,
//! a reference where the descriptor says the slot holds one, else the word as a number. A
//! path names such a slot `slotN`. `thor.MapNode`, whose descriptor has no names (its 128
//! reference slots would be 128 fields), is shown through `thor_core::mapnode`'s layout
//! instead: level, count, next leaf and its entries.
//!
//! # Maps and sequences
//!
//! `map` descends from the header's root to the leaf holding the first key at or after
//! `--from` (one node per level, checking that levels fall by one), then walks the leaf chain
//! until it has `--limit` entries and one more to say where the next page starts: it reads
//! the path and the leaves it lists, never the whole map. `seq` finds the chunk of element
//! `--from` by dividing down the directories, as `thor_client::values` does, and reads
//! chunk after chunk. Key and value types come from the codes the headers store (the
//! `MapKey`, `MapValue` and `Elem` codes of thor-client, read from those traits so that
//! they cannot drift).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use thor_client::map::MapHeader;
use thor_client::values::SeqHeader;
use thor_client::{Class, SCHEMA_SLOT};
use thor_core::le::{u32_at, u64_at};
use thor_core::mapnode;
use thor_core::{ClassDesc, FieldKind, Oid, Oref, PageId, PageView, Scalar, VarKind, builtin};

use super::error::InspectError;
use super::limits::{BYTES_SHOWN, PATH_STEPS_MAX, SHORT_TEXT_BYTES, VAR_ELEMS_SHOWN};
use super::source::{ObjectSource, Pages};

mod collections;

use collections::{ElemType, node};

/// The class of a sequence's header.
const SEQ_CLASS: &str = <SeqHeader as Class>::NAME;
/// The class of a map's header.
const MAP_CLASS: &str = <MapHeader as Class>::NAME;
/// The class of a string.
const STR_CLASS: &str = <thor_client::Str as Class>::NAME;

/// An object as stored, with its class.
pub struct Obj {
    /// Its oref.
    pub oref: Oref,
    /// Its class object's oref.
    pub class: Oref,
    /// Its class.
    pub desc: Arc<ClassDesc>,
    /// Its bytes (class word first, references as orefs), checked against the class's shape.
    pub bytes: Bytes,
}

impl Obj {
    /// The word at byte `off`, which lies within the object (a field offset of its class:
    /// the shape was checked).
    fn word(&self, off: usize) -> u32 {
        u32_at(&self.bytes, off)
    }

    /// The reference word at byte `off` as an oref (`None`: null).
    fn ref_at(&self, off: usize) -> Result<Option<Oref>, InspectError> {
        let w = self.word(off);
        if w == 0 {
            return Ok(None);
        }
        Oref::object(w).map(Some).map_err(|why| InspectError::Malformed {
            oref: self.oref,
            why: format!("the reference word at byte {off} ({w:#x}) {why}"),
        })
    }

    /// Elements of the variable part (0 without one).
    fn var_count(&self) -> usize {
        match self.desc.var() {
            VarKind::None => 0,
            _ => self.word(self.desc.count_offset()) as usize,
        }
    }

    /// Reference `i` of the variable part (`i < var_count`, a part of references).
    fn var_ref(&self, i: usize) -> Result<Option<Oref>, InspectError> {
        debug_assert!(self.desc.var() == VarKind::Refs && i < self.var_count());
        self.ref_at(self.desc.var_offset() + 4 * i)
    }

    /// The class name.
    pub fn class_name(&self) -> &str {
        self.desc.name()
    }

    fn malformed(&self, why: impl Into<String>) -> InspectError {
        InspectError::Malformed { oref: self.oref, why: why.into() }
    }
}

/// The name `inspect` gives root slot `slot`: `schema` for the schema directory, else
/// `rootN`.
pub fn root_name(slot: usize) -> String {
    if slot == SCHEMA_SLOT { "schema".to_string() } else { format!("root{slot}") }
}

/// Where a target starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// An object named by its oref.
    Oref(Oref),
    /// A root slot.
    Root(usize),
}

/// What `object`, `map` and `seq` are given: an oref or a root name, then fields to follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The first object.
    pub start: Start,
    /// Fields (names, `slotN`, or element indexes) to follow from it, in order.
    pub steps: Vec<String>,
}

/// Parses `PAGE.OID[.step...]` or `ROOT[.step...]` (`root0`..`root15`, `schema`).
pub fn parse_target(text: &str) -> Result<Target, InspectError> {
    let bad = || InspectError::BadTarget(text.to_string());
    let mut parts = text.split('.');
    let first = parts.next().ok_or_else(bad)?;
    let start = if let Ok(page) = first.parse::<u32>() {
        let oid = parts.next().and_then(|o| o.parse::<u16>().ok()).ok_or_else(bad)?;
        let page = PageId::new(page).ok_or_else(bad)?;
        Start::Oref(Oref::new(page, Oid::new(oid).ok_or_else(bad)?))
    } else if first == "schema" {
        Start::Root(SCHEMA_SLOT)
    } else {
        let slot = first.strip_prefix("root").and_then(|n| n.parse::<usize>().ok());
        match slot {
            Some(s) if s < builtin::ROOT_SLOTS => Start::Root(s),
            _ => return Err(bad()),
        }
    };
    let steps: Vec<String> = parts.map(str::to_string).collect();
    if steps.iter().any(String::is_empty) || steps.len() > PATH_STEPS_MAX {
        return Err(bad());
    }
    Ok(Target { start, steps })
}

/// One root slot.
#[derive(Debug, Serialize)]
pub struct RootOut {
    /// The slot's index in the root object.
    pub slot: usize,
    /// Its name for `object` and paths.
    pub name: String,
    /// The object it names.
    #[serde(rename = "ref")]
    pub target: String,
    /// That object's class, and what it holds.
    #[serde(flatten)]
    pub about: About,
}

/// What a reference points at: the class, and a one-line summary of a built-in value
/// (a string's text, a sequence's length, a map's types).
#[derive(Debug, Clone, Serialize)]
pub struct About {
    /// The class name (`<unreadable>` when the object cannot be read: `summary` says why).
    pub class: String,
    /// What it holds, for the built-in classes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// One field (or fixed slot) of an object.
#[derive(Debug, Serialize)]
pub struct FieldOut {
    /// The field's name (`slotN` for a class that does not name its fields).
    pub name: String,
    /// Its type, spelled as in a `class!` declaration.
    #[serde(rename = "type")]
    pub ty: String,
    /// Its byte offset in the object.
    pub offset: usize,
    /// The stored value: a number, `true`/`false`, `null` (`None`, a null reference), an oref
    /// `"PAGE.OID"` (references and strings), or lower-case hex (byte arrays).
    pub value: Value,
    /// A string's text or a byte array's, when it is UTF-8 (at most `BYTES_SHOWN` bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// What a non-null reference points at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<About>,
}

/// An object's variable part.
#[derive(Debug, Serialize)]
pub struct VarOut {
    /// `bytes`, `refs` or `strs` (references to strings).
    pub kind: &'static str,
    /// Elements (bytes or references) it has.
    pub count: usize,
    /// For bytes: the first `BYTES_SHOWN` as hex; for references: the first
    /// `VAR_ELEMS_SHOWN` orefs (or `null`).
    pub elements: Value,
    /// For bytes: their text, when UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Whether more elements exist than are shown.
    pub truncated: bool,
}

/// An object with its class and decoded fields.
#[derive(Debug, Serialize)]
pub struct ObjectOut {
    /// Its oref.
    pub oref: String,
    /// Its class name.
    pub class: String,
    /// Its class object's oref.
    pub class_oref: String,
    /// Its size in bytes, class word included.
    pub size_bytes: usize,
    /// Whether the class names its fields (descriptor format 2); otherwise `fields` are its
    /// fixed slots.
    pub named_fields: bool,
    /// Its fields in order.
    pub fields: Vec<FieldOut>,
    /// Its variable part, if the class has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub var: Option<VarOut>,
    /// What a built-in value holds (a sequence's length and element type, a map's types, a
    /// map node's level and count, a string's text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// A class and how many objects it has.
#[derive(Debug, Serialize)]
pub struct ClassOut {
    /// The class object's oref.
    pub oref: String,
    /// The class name.
    pub name: String,
    /// The descriptor format: 2 names its fields, 1 does not.
    pub format: u16,
    /// Bytes of the fixed part.
    pub fixed_bytes: usize,
    /// The variable part: `none`, `bytes` or `refs`.
    pub var: &'static str,
    /// The fields (`null` for format 1).
    pub fields: Option<Vec<FieldDesc>>,
    /// Objects of the class in the database.
    pub objects: u64,
}

/// A field as a descriptor records it.
#[derive(Debug, Serialize)]
pub struct FieldDesc {
    /// Its name.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub ty: String,
    /// Its byte offset in an object.
    pub offset: usize,
}

/// The census of `classes`.
#[derive(Debug, Serialize)]
pub struct Census {
    /// Pages read (every page of the database, 1 to the last).
    pub pages: u64,
    /// Objects in them.
    pub objects: u64,
    /// Every class object found, in oref order, with its instances counted.
    pub classes: Vec<ClassOut>,
    /// Objects whose class word names no class object (a damaged database): `[oref, count]`
    /// per class word.
    pub unknown_classes: Vec<(String, u64)>,
}

/// A page of a map's entries.
#[derive(Debug, Serialize)]
pub struct MapOut {
    /// The map's header.
    pub map: String,
    /// The key type.
    pub key_type: String,
    /// The value type.
    pub value_type: String,
    /// The entries, in key order, from the first key at or after `--from`.
    pub entries: Vec<EntryOut>,
    /// The key of the entry after the last one shown: pass it as `--from` for the next page
    /// (`null`: none is left).
    pub next: Option<Value>,
}

/// One map entry.
#[derive(Debug, Serialize)]
pub struct EntryOut {
    /// The key: a number, a string, or hex for byte-string keys.
    pub key: Value,
    /// The value, as fields show values.
    pub value: Value,
    /// What a reference value points at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<About>,
}

/// A page of a sequence's elements.
#[derive(Debug, Serialize)]
pub struct SeqOut {
    /// The sequence's header.
    pub seq: String,
    /// The element type.
    pub elem_type: &'static str,
    /// Elements in the sequence.
    pub len: usize,
    /// The first index shown.
    pub from: usize,
    /// The elements from `from` on, at most `--limit`: `[index, value]`.
    pub entries: Vec<(usize, Value)>,
    /// Whether elements follow the last one shown.
    pub more: bool,
}

/// The decoder: pages, and the classes read so far.
pub struct Inspector<S> {
    /// Where objects come from.
    pages: Pages<S>,
    /// Class descriptors by class oref (a class per stored class object: a handful).
    classes: HashMap<Oref, Arc<ClassDesc>>,
}

impl<S: ObjectSource> Inspector<S> {
    /// A decoder over `src`.
    pub fn new(src: S) -> Inspector<S> {
        Inspector { pages: Pages::new(src), classes: HashMap::new() }
    }

    /// The class whose class object is `class`.
    fn class(&mut self, class: Oref) -> Result<Arc<ClassDesc>, InspectError> {
        if let Some(d) = builtin::desc(class) {
            return Ok(Arc::new(d.clone()));
        }
        if let Some(d) = self.classes.get(&class) {
            return Ok(d.clone());
        }
        let bytes = self.pages.object(class)?;
        let desc = ClassDesc::from_class_object(&bytes).map_err(|e| InspectError::Malformed {
            oref: class,
            why: format!("not a class object: {e}"),
        })?;
        let desc = Arc::new(desc);
        self.classes.insert(class, desc.clone());
        Ok(desc)
    }

    /// Object `oref` with its class, its shape checked.
    pub fn object(&mut self, oref: Oref) -> Result<Obj, InspectError> {
        let bytes = self.pages.object(oref)?;
        let malformed = |why: String| InspectError::Malformed { oref, why };
        if bytes.len() < 4 {
            return Err(malformed("shorter than a class word".into()));
        }
        let word = u32_at(&bytes, 0);
        let class = Oref::object(word)
            .map_err(|why| malformed(format!("its class word {word:#x} {why}")))?;
        let desc = self
            .class(class)
            .map_err(|e| malformed(format!("its class {class} cannot be read: {e}")))?;
        desc.check_shape(&bytes)
            .map_err(|why| malformed(format!("not a {} object: {why}", desc.name())))?;
        Ok(Obj { oref, class, desc, bytes })
    }

    /// The root object.
    fn root_obj(&mut self) -> Result<Obj, InspectError> {
        let root = self.pages.root();
        let obj = self.object(root)?;
        if obj.class != builtin::REFS || obj.var_count() < builtin::ROOT_SLOTS {
            return Err(obj.malformed("the root is not a thor.Refs of 16 slots"));
        }
        Ok(obj)
    }

    /// The root's oref and its non-empty slots.
    pub fn roots(&mut self) -> Result<(Oref, Vec<RootOut>), InspectError> {
        let root = self.root_obj()?;
        let mut out = Vec::new();
        for slot in 0..builtin::ROOT_SLOTS {
            if let Some(target) = root.var_ref(slot)? {
                let about = self.about(target);
                out.push(RootOut {
                    slot,
                    name: root_name(slot),
                    target: target.to_string(),
                    about,
                });
            }
        }
        Ok((root.oref, out))
    }

    /// The object `target` names, following its steps.
    pub fn resolve(&mut self, target: &Target) -> Result<Oref, InspectError> {
        let mut at = match target.start {
            Start::Oref(o) => o,
            Start::Root(slot) => {
                self.root_obj()?.var_ref(slot)?.ok_or(InspectError::EmptyRoot { slot })?
            }
        };
        for step in &target.steps {
            at = self.step(at, step)?;
        }
        Ok(at)
    }

    /// Follows `step` from object `at`: a field name (or `slotN`), or an element index of a
    /// variable part of references or of a sequence of references.
    pub fn step(&mut self, at: Oref, step: &str) -> Result<Oref, InspectError> {
        let obj = self.object(at)?;
        let (what, r) = if let Ok(i) = step.parse::<usize>() {
            (format!("element {i}"), self.element_ref(&obj, i)?)
        } else {
            let Some((kind, off)) = field_named(&obj.desc, step) else {
                return Err(InspectError::NoSuchField {
                    oref: at,
                    class: obj.class_name().to_string(),
                    field: step.to_string(),
                    fields: field_names(&obj.desc),
                });
            };
            if !kind.is_ref() {
                return Err(InspectError::NotARef {
                    oref: at,
                    what: format!("field {step}"),
                    ty: kind.to_string(),
                });
            }
            (format!("field {step}"), obj.ref_at(off)?)
        };
        r.ok_or(InspectError::NullRef { oref: at, what })
    }

    /// Reference element `i` of `obj`: of its variable part, or of the sequence it heads.
    fn element_ref(&mut self, obj: &Obj, i: usize) -> Result<Option<Oref>, InspectError> {
        let not_ref = |ty: &str| InspectError::NotARef {
            oref: obj.oref,
            what: format!("element {i}"),
            ty: ty.to_string(),
        };
        if obj.class_name() == SEQ_CLASS {
            let seq = self.seq_info(obj)?;
            if seq.elem != ElemType::Ref {
                return Err(not_ref(seq.elem.name()));
            }
            if i >= seq.len {
                return Err(not_ref(&format!("past the end: the sequence has {}", seq.len)));
            }
            let (chunk, at, _) = self.seq_chunk(obj.oref, &seq, i)?;
            return chunk.var_ref(at);
        }
        match obj.desc.var() {
            VarKind::Refs if i < obj.var_count() => obj.var_ref(i),
            VarKind::Refs => Err(not_ref(&format!("past the end: it has {}", obj.var_count()))),
            VarKind::Bytes => Err(not_ref("a byte")),
            VarKind::None => Err(not_ref("no variable part")),
        }
    }

    /// What reference `r` points at, for a line of output; an unreadable target is said so,
    /// not an error (the object that holds the reference is what was asked for).
    pub fn about(&mut self, r: Oref) -> About {
        match self.object(r) {
            Ok(obj) => {
                let summary = self.summary(&obj).unwrap_or_else(|e| Some(format!("<{e}>")));
                About { class: obj.class_name().to_string(), summary }
            }
            Err(e) => About { class: "<unreadable>".into(), summary: Some(e.to_string()) },
        }
    }

    /// A one-line summary of a built-in value.
    fn summary(&mut self, obj: &Obj) -> Result<Option<String>, InspectError> {
        let name = obj.class_name();
        Ok(Some(match name {
            STR_CLASS => {
                let (text, truncated) = shown_text(obj.desc.var_bytes(&obj.bytes));
                let more = if truncated { "..." } else { "" };
                format!("{:?}{more}", text.unwrap_or_else(|| "<not UTF-8>".into()))
            }
            SEQ_CLASS => {
                let s = self.seq_info(obj)?;
                format!("sequence of {} {}", s.len, s.elem.name())
            }
            MAP_CLASS => {
                let m = self.map_info(obj)?;
                format!("map {} -> {}", m.key.name(), m.value.name())
            }
            "thor.MapNode" => {
                let n = node(obj)?;
                format!("map node, level {}, {} entries", n.level, n.count)
            }
            "thor.Refs" => format!("{} references", obj.var_count()),
            "thor.Bytes" => {
                // Short byte strings (OO7's type names) are worth their text.
                let b = obj.desc.var_bytes(&obj.bytes);
                match (printable(b.strip_suffix_zeros()), b.len() > BYTES_SHOWN) {
                    (Some(t), false) if t.len() <= SHORT_TEXT_BYTES => {
                        format!("{} bytes: {t:?}", b.len())
                    }
                    _ => format!("{} bytes", b.len()),
                }
            }
            "thor.Large" if obj.class == builtin::LARGE => {
                let kind = if obj.word(12) == 2 { "references" } else { "bytes" };
                format!("large object of {} {kind}", u64_at(&obj.bytes, 4))
            }
            "thor.Class" => match ClassDesc::from_class_object(&obj.bytes) {
                Ok(d) => format!("the class {}", d.name()),
                Err(e) => format!("a malformed class: {e}"),
            },
            _ => return Ok(None),
        }))
    }

    /// Object `oref` with every field decoded.
    pub fn show(&mut self, oref: Oref) -> Result<ObjectOut, InspectError> {
        let obj = self.object(oref)?;
        let mut fields = Vec::new();
        if obj.desc.has_fields() {
            let defs: Vec<(String, FieldKind, usize)> =
                obj.desc.fields().map(|(n, k, o)| (n.to_string(), k, o)).collect();
            for (name, kind, off) in defs {
                fields.push(self.field(&obj, name, kind, off)?);
            }
        } else if obj.class_name() == mapnode::NAME {
            // Its layout is thor_core::mapnode's: the fixed words by name, then the slots in
            // use (children, or reference values); the entry area's keys need the map's key
            // type, which only its header knows (`map` lists them).
            let n = node(&obj)?;
            let u32_kind = FieldKind::Scalar(Scalar::U32);
            fields.push(self.field(&obj, "count".into(), u32_kind, mapnode::COUNT_AT)?);
            fields.push(self.field(&obj, "level".into(), u32_kind, mapnode::LEVEL_AT)?);
            let next = FieldKind::OptionalRef;
            fields.push(self.field(&obj, "next".into(), next, mapnode::NEXT_AT)?);
            for i in 0..n.count.min(mapnode::FANOUT).min(VAR_ELEMS_SHOWN) {
                let at = mapnode::SLOTS_AT + 4 * i;
                if obj.word(at) != 0 {
                    fields.push(self.field(&obj, format!("slot{i}"), next, at)?);
                }
            }
        } else {
            for slot in 0..obj.desc.fixed_bytes() / 4 {
                let kind = if obj.desc.ref_slots().contains(&(slot as u16)) {
                    FieldKind::OptionalRef
                } else {
                    FieldKind::Scalar(Scalar::U32)
                };
                fields.push(self.field(&obj, format!("slot{slot}"), kind, 4 + 4 * slot)?);
            }
        }
        let var = if obj.class_name() == mapnode::NAME { None } else { self.var_part(&obj)? };
        let summary = self.summary(&obj)?;
        Ok(ObjectOut {
            oref: oref.to_string(),
            class: obj.class_name().to_string(),
            class_oref: obj.class.to_string(),
            size_bytes: obj.bytes.len(),
            named_fields: obj.desc.has_fields(),
            fields,
            var,
            summary,
        })
    }

    /// One field of `obj` of type `kind` at byte `off`.
    fn field(
        &mut self,
        obj: &Obj,
        name: String,
        kind: FieldKind,
        off: usize,
    ) -> Result<FieldOut, InspectError> {
        let mut out = FieldOut {
            name,
            ty: kind.to_string(),
            offset: off,
            value: Value::Null,
            text: None,
            target: None,
        };
        match kind {
            FieldKind::Scalar(s) => out.value = scalar(&obj.bytes[off..], s),
            FieldKind::Optional(s) => {
                if obj.word(off) != 0 {
                    out.value = scalar(&obj.bytes[off + 4..], s);
                }
            }
            FieldKind::Bytes(n) => {
                let b = &obj.bytes[off..off + n as usize];
                out.value = Value::String(hex(b));
                out.text = printable(b.strip_suffix_zeros());
            }
            FieldKind::Ref | FieldKind::OptionalRef => {
                if let Some(r) = obj.ref_at(off)? {
                    out.value = Value::String(r.to_string());
                    out.target = Some(self.about(r));
                }
            }
            FieldKind::Str | FieldKind::OptionalStr => {
                if let Some(r) = obj.ref_at(off)? {
                    out.value = Value::String(r.to_string());
                    match self.object(r) {
                        Ok(s) if s.class_name() == STR_CLASS => {
                            out.text = shown_text(s.desc.var_bytes(&s.bytes)).0;
                        }
                        _ => out.target = Some(self.about(r)),
                    }
                }
            }
        }
        Ok(out)
    }

    /// The variable part of `obj`, bounded.
    fn var_part(&mut self, obj: &Obj) -> Result<Option<VarOut>, InspectError> {
        let count = obj.var_count();
        Ok(match obj.desc.var() {
            VarKind::None => None,
            VarKind::Bytes => {
                let b = obj.desc.var_bytes(&obj.bytes);
                let shown = &b[..b.len().min(BYTES_SHOWN)];
                Some(VarOut {
                    kind: "bytes",
                    count,
                    elements: Value::String(hex(shown)),
                    text: printable(shown),
                    truncated: b.len() > shown.len(),
                })
            }
            VarKind::Refs => {
                let n = count.min(VAR_ELEMS_SHOWN);
                let mut elems = Vec::with_capacity(n);
                for i in 0..n {
                    elems.push(
                        obj.var_ref(i)?.map_or(Value::Null, |r| Value::String(r.to_string())),
                    );
                }
                let strs = obj.desc.var_elem() == Some(thor_core::VarElem::Str);
                Some(VarOut {
                    kind: if strs { "strs" } else { "refs" },
                    count,
                    elements: Value::Array(elems),
                    text: None,
                    truncated: count > n,
                })
            }
        })
    }

    /// Every class with its number of objects: reads every page of the database, 1 to the
    /// last, once, in order (not through the cache), calling `progress(done, total)` per page.
    pub fn census(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<Census, InspectError> {
        let last = self.last_page()?;
        let mut counts: BTreeMap<u32, u64> = BTreeMap::new();
        let mut found: BTreeMap<Oref, ClassDesc> = BTreeMap::new();
        let (mut pages, mut objects) = (0u64, 0u64);
        let mut id = PageId::FIRST;
        while id.get() <= last {
            let Some(page) = self.pages.source().page(id)? else { break };
            let view = PageView::parse(&page)
                .map_err(|cause| InspectError::BadPage { page: id.get(), cause })?;
            for (oid, obj) in view.objects() {
                objects += 1;
                let word = if obj.len() >= 4 { u32_at(obj, 0) } else { 0 };
                *counts.entry(word).or_default() += 1;
                if word == builtin::META.raw() {
                    let oref = Oref::new(id, oid);
                    let desc = ClassDesc::from_class_object(obj).map_err(|e| {
                        InspectError::Malformed { oref, why: format!("not a class object: {e}") }
                    })?;
                    found.insert(oref, desc);
                }
            }
            pages += 1;
            progress(pages, u64::from(last));
            let Some(next) = id.next() else { break };
            id = next;
        }
        let classes = found
            .iter()
            .map(|(oref, d)| ClassOut {
                oref: oref.to_string(),
                name: d.name().to_string(),
                format: if d.has_fields() { 2 } else { 1 },
                fixed_bytes: d.fixed_bytes(),
                var: var_name(d.var()),
                fields: d.has_fields().then(|| {
                    d.fields()
                        .map(|(n, k, o)| FieldDesc { name: n.into(), ty: k.to_string(), offset: o })
                        .collect()
                }),
                objects: counts.get(&oref.raw()).copied().unwrap_or(0),
            })
            .collect();
        let unknown_classes = counts
            .iter()
            .filter(|(w, _)| Oref::from_raw(**w).is_none_or(|o| !found.contains_key(&o)))
            .map(|(w, n)| (format!("{:#x}", w), *n))
            .collect();
        Ok(Census { pages, objects, classes, unknown_classes })
    }

    /// The last page of the database, found by fetching: pages 1 to the last exist and none
    /// after (the server's `NoSuchPage`), so doubling then halving takes about two fetches
    /// per bit of the page count. (A server's `Stats` would say it too, but needs an operator's
    /// scope; a fetch needs only a read scope.)
    fn last_page(&mut self) -> Result<u32, InspectError> {
        let mut exists = |n: u32| -> Result<bool, InspectError> {
            match PageId::new(n) {
                Some(id) => Ok(self.pages.source().page(id)?.is_some()),
                None => Ok(false),
            }
        };
        if !exists(1)? {
            return Ok(0);
        }
        let (mut lo, mut hi) = (1u32, 2u32);
        while exists(hi)? {
            lo = hi;
            hi = hi.saturating_mul(2);
            if hi == lo {
                return Ok(lo);
            }
        }
        // Invariant: page `lo` exists, page `hi` does not.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if exists(mid)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }
}

/// The type and offset of the field of `desc` named `name` (or, for a class without names,
/// fixed slot `slotN`).
fn field_named(desc: &ClassDesc, name: &str) -> Option<(FieldKind, usize)> {
    if desc.has_fields() {
        return desc.fields().find(|(n, _, _)| *n == name).map(|(_, k, o)| (k, o));
    }
    let slot: usize = name.strip_prefix("slot")?.parse().ok()?;
    (slot < desc.fixed_bytes() / 4).then(|| {
        let kind = if desc.ref_slots().contains(&(slot as u16)) {
            FieldKind::OptionalRef
        } else {
            FieldKind::Scalar(Scalar::U32)
        };
        (kind, 4 + 4 * slot)
    })
}

/// The fields of `desc`, for an error message.
fn field_names(desc: &ClassDesc) -> String {
    if desc.has_fields() {
        let names: Vec<&str> = desc.fields().map(|(n, _, _)| n).collect();
        if names.is_empty() { "none".into() } else { names.join(", ") }
    } else {
        format!("not named; its slots are slot0..slot{}", (desc.fixed_bytes() / 4).max(1) - 1)
    }
}

fn var_name(v: VarKind) -> &'static str {
    match v {
        VarKind::None => "none",
        VarKind::Bytes => "bytes",
        VarKind::Refs => "refs",
    }
}

/// A number of type `s` at the start of `b`.
fn scalar(b: &[u8], s: Scalar) -> Value {
    let w4 = || u32_at(b, 0);
    let w8 = || u64_at(b, 0);
    match s {
        Scalar::U32 => json!(w4()),
        Scalar::I32 => json!(w4() as i32),
        Scalar::F32 => json!(f32::from_bits(w4())),
        Scalar::U64 => json!(w8()),
        Scalar::I64 => json!(w8() as i64),
        Scalar::F64 => json!(f64::from_bits(w8())),
        Scalar::Bool => json!(w4() != 0),
    }
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The first [`BYTES_SHOWN`] bytes of `b` as text if they are UTF-8 (cut at a character
/// boundary), and whether `b` is longer.
fn shown_text(b: &[u8]) -> (Option<String>, bool) {
    let cut = &b[..b.len().min(BYTES_SHOWN)];
    let text = match std::str::from_utf8(cut) {
        Ok(t) => Some(t.to_string()),
        // A character cut at the bound: the valid prefix.
        Err(e) if e.error_len().is_none() && cut.len() < b.len() => {
            Some(String::from_utf8_lossy(&cut[..e.valid_up_to()]).into_owned())
        }
        Err(_) => None,
    };
    (text, b.len() > cut.len())
}

/// The text of bytes that are not meant as text (byte arrays, byte parts): shown only when
/// it is UTF-8 without control characters other than white space, else the hex alone says it.
fn printable(b: &[u8]) -> Option<String> {
    shown_text(b).0.filter(|t| !t.chars().any(|c| c.is_control() && !c.is_whitespace()))
}

/// Byte arrays are zero-padded: their text without the trailing zeros.
trait StripZeros {
    fn strip_suffix_zeros(&self) -> &[u8];
}

impl StripZeros for [u8] {
    fn strip_suffix_zeros(&self) -> &[u8] {
        let end = self.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        &self[..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_orefs_roots_and_paths() {
        let t = parse_target("12.3").unwrap();
        assert_eq!(t.start, Start::Oref(Oref::new(PageId::new(12).unwrap(), Oid::new(3).unwrap())));
        assert!(t.steps.is_empty());
        let t = parse_target("root2.part_of.documentation").unwrap();
        assert_eq!(t.start, Start::Root(2));
        assert_eq!(t.steps, ["part_of", "documentation"]);
        assert_eq!(parse_target("schema.4").unwrap().start, Start::Root(SCHEMA_SLOT));
        assert_eq!(parse_target("12.3.to.0").unwrap().steps, ["to", "0"]);
        for bad in ["", "12", "12.x", "root16", "rootx", "root1..to", "0.1", "12.600", "name"] {
            assert!(parse_target(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn root_names_round_trip() {
        for slot in 0..builtin::ROOT_SLOTS {
            assert_eq!(parse_target(&root_name(slot)).unwrap().start, Start::Root(slot));
        }
    }

    #[test]
    fn shown_text_is_bounded_and_cut_at_a_character() {
        let long = "é".repeat(BYTES_SHOWN);
        let (t, more) = shown_text(long.as_bytes());
        assert!(more);
        assert_eq!(t.unwrap().len(), BYTES_SHOWN);
        assert_eq!(shown_text(&[0xff, 0]).0, None);
        assert_eq!(shown_text(b"type003").0.as_deref(), Some("type003"));
        assert_eq!(printable(b"a\x01b"), None, "a control character is not text");
        assert_eq!(printable(b"two\nlines").as_deref(), Some("two\nlines"));
    }

    /// Untrusted bytes never panic: every byte of a page flipped in turn, and every command
    /// answers or fails with an error.
    #[test]
    fn a_damaged_page_gives_errors_not_panics() {
        let good = builtin::first_page(4096).unwrap();
        for at in 0..good.len() {
            for flip in [0xff, 0x01, 0x80] {
                let mut page = good.clone();
                page[at] ^= flip;
                let src = super::super::source::MemSource {
                    pages: vec![Bytes::from(page)],
                    page_size: 4096,
                };
                let mut ins = Inspector::new(src);
                let _ = ins.roots();
                let _ = ins.census(&mut |_, _| {});
                for oid in 0..7 {
                    let o = Oref::new(PageId::FIRST, Oid::new(oid).unwrap());
                    let _ = ins.show(o);
                    let _ = ins.map(o, Some("x"), 3);
                    let _ = ins.seq(o, 0, 3);
                }
            }
        }
    }

    /// The in-memory source serves a new database's first page: the root and its classes.
    #[test]
    fn a_new_database_has_empty_roots_and_the_builtin_classes() {
        let page = Bytes::from(builtin::first_page(4096).unwrap());
        let src = super::super::source::MemSource { pages: vec![page], page_size: 4096 };
        let mut ins = Inspector::new(src);
        let (root, slots) = ins.roots().unwrap();
        assert_eq!(root, builtin::ROOT);
        assert!(slots.is_empty());
        let census = ins.census(&mut |_, _| {}).unwrap();
        assert_eq!((census.pages, census.objects), (1, 6));
        let names: Vec<&str> = census.classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["thor.Class", "thor.Bytes", "thor.Refs", "thor.Surrogate", "thor.Large"]
        );
        assert_eq!(census.classes[0].objects, 5, "the five class objects");
        assert_eq!(census.classes[2].objects, 1, "the root");
        let o = ins.show(builtin::ROOT).unwrap();
        assert_eq!((o.class.as_str(), o.var.as_ref().unwrap().count), ("thor.Refs", 16));
        let err = ins.show(Oref::new(PageId::FIRST, Oid::new(9).unwrap())).unwrap_err();
        assert!(matches!(err, InspectError::UnknownObject { .. }), "{err}");
        let err = ins.map(builtin::ROOT, None, 5).unwrap_err();
        assert!(matches!(err, InspectError::NotAMap { .. }), "{err}");
        let err = ins.seq(builtin::ROOT, 0, 5).unwrap_err();
        assert!(matches!(err, InspectError::NotASeq { .. }), "{err}");
    }
}
