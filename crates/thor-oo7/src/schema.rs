//! The OO7 classes on thor's typed API, and the object layouts chosen for them.
//!
//! # Objects and sub-objects
//!
//! OO7's classes have string and collection attributes. Thor's implementation (in Theta) stored
//! each string and each collection as an object of its own, and the HAC paper's T1+ ("visits
//! every sub-object of atomic parts and connections") and its page-use figures (T1 uses 49% of
//! the objects of the pages it touches, T1+ 91%) only make sense with that layout. So, here:
//!
//! - every design object's `type` is a separate [`Bytes`] object of 10 bytes;
//! - every collection (`to`, `from`, `parts`, `subAssemblies`, `componentsPriv`/`Shar`,
//!   `usedInPriv`/`Shar`) is a separate `thor.Refs` object;
//! - a module's `allBases` is a chunked collection: a `Refs` of `Refs` of at most
//!   [`crate::limits::CHUNK_REFS`] base assemblies each (QuickStore's big database has 2,187);
//! - document and manual texts are large objects (`thor.Large` trees of page-sized pieces),
//!   referenced from small `Document` and `Manual` objects that carry the id and title.
//!
//! An atomic part with three connections is then ten objects: the part, its type, `to`, `from`,
//! three connections and their three types. T1 reads five of them (the part, `to` and the
//! connections), 50%; T1+ reads all ten.
//!
//! ```text
//!  AtomicPart 40 B ──kind──► Bytes 20 B ("type003")
//!     │  ├──to────► Refs 20 B ──► Connection 20 B ──to──► AtomicPart ...
//!     │  │                          └──kind──► Bytes 20 B
//!     │  └──from──► Refs 8+4n B ──► Connection (incoming)
//!     └──partOf──► CompositePart
//! ```
//!
//! # Layouts
//!
//! Field order is the declaration order below; every object starts with its 4-byte class
//! header. Sizes (with the header): Module 28, Manual 56, ComplexAssembly 28, BaseAssembly 32,
//! CompositePart 36, Document 56, AtomicPart 40, Connection 20; a type string 20; a collection
//! of n references 8 + 4n.
//!
//! Dates, coordinates and lengths are `u32` (OO7's ints are never negative in its ranges);
//! updates add with wrap-around.
//!
//! # Objects padded to GOM's sizes (HAC-BIG)
//!
//! The HAC paper's Figure 7 compares HAC with GOM, whose objects are larger: "GOM uses 96-bit
//! pointers and has 12-byte per-object overheads" (section 4.2.1), against Thor's 32-bit
//! references and 32-bit object headers (section 2). To tell the effect of small objects from
//! that of the cache manager it adds HAC-BIG, "HAC except that we padded its objects to be
//! approximately the same size as GOM's" (section 4.2.4). [`Padding::Gom`] is that setting:
//! each OO7 class is stored with its fixed part extended (`thor_core::ClassDesc::extends`)
//! by GOM's extra [`GOM_HEADER_EXTRA_BYTES`] of header and [`GOM_REF_EXTRA_BYTES`] per
//! reference slot, words no program declares, so the same typed classes read both databases:
//!
//! ```text
//! class            refs  Thor  GOM-padded        class            refs  Thor  GOM-padded
//! Module             4    28    68               AtomicPart         4    40    80
//! Manual             2    56    80               Connection         3    20    52
//! ComplexAssembly    4    28    68               oo7.Params         0    64    72
//! BaseAssembly       5    32    80               oo7.Index          1    16    32
//! CompositePart      6    36    92               oo7.IndexNode      0   524   532 (+ children)
//! Document           2    56    80
//! ```
//!
//! The built-in objects are not padded: `type` strings (`thor.Bytes`), collections
//! (`thor.Refs`) and document texts keep Thor's sizes, because their classes are the
//! database's own and a padding of 8 bytes per element cannot be a fixed part (the references
//! in a variable part, an index node's children included, stay 4 bytes too). `docs/oo7.md`
//! ("Figure 7") has what that leaves of GOM's sizes.

use thor_client::{Any, Bytes, Ref, Refs};

/// Bytes of every `type` string ("type000" to "type009", zero-padded).
pub const TYPE_BYTES: usize = 10;
/// Bytes of a document or manual title.
pub const TITLE_BYTES: usize = 40;
/// Number of distinct types.
pub const TYPES: u32 = 10;

thor_client::class! {
    /// A module: the root of one assembly tree, with its manual.
    pub class Module("oo7.Module") {
        /// The module id (1-based).
        id: u32,
        /// OO7's `type`.
        kind: Ref<Bytes>,
        /// OO7's `buildDate`.
        build_date: u32,
        /// The manual.
        man: Ref<Manual>,
        /// The root complex assembly.
        design_root: Ref<ComplexAssembly>,
        /// Every base assembly of the module, chunked.
        all_bases: Ref<Refs<Refs<BaseAssembly>>>,
    }
}

thor_client::class! {
    /// A module's manual; its text is a large object.
    pub class Manual("oo7.Manual") {
        /// The manual id (its module's id).
        id: u32,
        /// "Manual for module NNNNNNNN", zero-padded.
        title: [u8; 40],
        /// The module it documents.
        module: Ref<Module>,
        /// The text: a `thor.Large` object of bytes.
        text: Ref<Any>,
    }
}

thor_client::class! {
    /// An assembly whose children are assemblies.
    pub class ComplexAssembly("oo7.ComplexAssembly") {
        /// The assembly id (1-based, preorder across modules).
        id: u32,
        /// OO7's `type`.
        kind: Ref<Bytes>,
        /// OO7's `buildDate`.
        build_date: u32,
        /// The parent, or null for the module's design root.
        super_assembly: Ref<ComplexAssembly>,
        /// The module.
        module: Ref<Module>,
        /// The children: complex assemblies, or base assemblies one level above the leaves.
        sub_assemblies: Ref<Refs<Any>>,
    }
}

thor_client::class! {
    /// An assembly at the last level: it uses composite parts.
    pub class BaseAssembly("oo7.BaseAssembly") {
        /// The assembly id (1-based, preorder across modules).
        id: u32,
        /// OO7's `type`.
        kind: Ref<Bytes>,
        /// OO7's `buildDate`.
        build_date: u32,
        /// The parent.
        super_assembly: Ref<ComplexAssembly>,
        /// The module.
        module: Ref<Module>,
        /// Composite parts of its own module (a bag: duplicates allowed). Traversals use these.
        components_priv: Ref<Refs<CompositePart>>,
        /// Composite parts of any module (a bag). Built, never traversed.
        components_shar: Ref<Refs<CompositePart>>,
    }
}

thor_client::class! {
    /// A composite part: a document and a graph of atomic parts.
    pub class CompositePart("oo7.CompositePart") {
        /// The composite part id (1-based across modules).
        id: u32,
        /// OO7's `type`.
        kind: Ref<Bytes>,
        /// OO7's `buildDate`: young parts (id % 10 == 0) in 2000..=2999, old ones in 0..=999.
        build_date: u32,
        /// Its document.
        documentation: Ref<Document>,
        /// Its atomic parts, in id order.
        parts: Ref<Refs<AtomicPart>>,
        /// The first atomic part created for it: where traversals start.
        root_part: Ref<AtomicPart>,
        /// Base assemblies using it privately (a bag).
        used_in_priv: Ref<Refs<BaseAssembly>>,
        /// Base assemblies using it shared (a bag).
        used_in_shar: Ref<Refs<BaseAssembly>>,
    }
}

thor_client::class! {
    /// A composite part's documentation; its text is a large object.
    pub class Document("oo7.Document") {
        /// The document id (its composite part's id).
        id: u32,
        /// "Composite Part NNNNNNNN", zero-padded.
        title: [u8; 40],
        /// The composite part it documents.
        part: Ref<CompositePart>,
        /// The text: a `thor.Large` object of bytes.
        text: Ref<Any>,
    }
}

thor_client::class! {
    /// An atomic part: a node of a composite part's graph.
    pub class AtomicPart("oo7.AtomicPart") {
        /// The atomic part id (1-based, dense across the database).
        id: u32,
        /// OO7's `type`.
        kind: Ref<Bytes>,
        /// OO7's `buildDate`, in 1000..=1999 when generated.
        build_date: u32,
        /// x coordinate, in 0..100000 when generated.
        x: u32,
        /// y coordinate, in 0..100000 when generated.
        y: u32,
        /// The id of its composite part's document.
        doc_id: u32,
        /// Outgoing connections, in creation order.
        to: Ref<Refs<Connection>>,
        /// Incoming connections, in creation order.
        from: Ref<Refs<Connection>>,
        /// Its composite part.
        part_of: Ref<CompositePart>,
    }
}

thor_client::class! {
    /// A directed edge between two atomic parts of one composite part.
    pub class Connection("oo7.Connection") {
        /// OO7's `type`.
        kind: Ref<Bytes>,
        /// Length, in 0..100000.
        length: u32,
        /// The source part.
        from: Ref<AtomicPart>,
        /// The target part.
        to: Ref<AtomicPart>,
    }
}

thor_client::class! {
    /// The generator's parameters, stored in the database (root slot [`SLOT_PARAMS`]) so that
    /// programs opening it know its shape.
    pub class ParamsObj("oo7.Params") {
        /// Format version of this object and of the database layout ([`LAYOUT_VERSION`]).
        version: u32,
        /// The seed.
        seed: u64,
        /// Atomic parts per composite part.
        atomic_per_composite: u32,
        /// Connections per atomic part.
        connections_per_atomic: u32,
        /// Document bytes.
        document_bytes: u32,
        /// Manual bytes.
        manual_bytes: u32,
        /// Composite parts per module.
        composite_per_module: u32,
        /// Assemblies per complex assembly.
        assemblies_per_assembly: u32,
        /// Assembly levels.
        assembly_levels: u32,
        /// Composite parts per base assembly.
        composite_per_base: u32,
        /// Modules.
        modules: u32,
        /// Document placement code.
        doc_placement: u32,
        /// The next unused composite part id (structural inserts take ids from here).
        next_composite: u32,
        /// The next unused atomic part id.
        next_atomic: u32,
    }
}

thor_client::class! {
    /// A persistent index: a B+-tree over 64-bit keys (see [`crate::btree`]).
    pub class Index("oo7.Index") {
        /// The root node.
        root: Ref<IndexNode>,
        /// Levels below the root (0: the root is a leaf).
        height: u32,
        /// Entries in the index.
        entries: u32,
    }
}

thor_client::class! {
    /// A node of a B+-tree. Leaves map `keys[i]` to `refs[i]`; inner nodes route keys below
    /// `keys[i]` to `refs[i]` and the rest to `refs[count]`.
    pub class IndexNode("oo7.IndexNode") {
        /// 1 for a leaf, 0 for an inner node.
        leaf: u32,
        /// Keys in use.
        count: u32,
        /// The keys, little-endian u64s, sorted.
        keys: [u8; 512],
    }
    var refs<Any>;
}

/// The version of the database layout this crate generates and reads.
pub const LAYOUT_VERSION: u32 = 1;

/// Root slot of the list of modules (`thor.Refs` of [`Module`]).
pub const SLOT_MODULES: usize = 0;
/// Root slot of the parameters object.
pub const SLOT_PARAMS: usize = 1;
/// Root slot of the atomic-part id index (key: id).
pub const SLOT_ATOMIC_ID_INDEX: usize = 2;
/// Root slot of the atomic-part build-date index (key: date << 32 | id).
pub const SLOT_ATOMIC_DATE_INDEX: usize = 3;
/// Root slot of the document title index (key: hash of the title).
pub const SLOT_DOCUMENT_TITLE_INDEX: usize = 4;

const _: () = assert!(512 == 8 * crate::limits::BTREE_FANOUT);

/// Bytes GOM's object header has beyond Thor's: 12 against 4 (HAC paper, sections 4.2.1 and 2).
pub const GOM_HEADER_EXTRA_BYTES: usize = 12 - thor_core::limits::OBJECT_HEADER_BYTES;
/// Bytes a GOM reference has beyond Thor's: 96 bits against 32.
pub const GOM_REF_EXTRA_BYTES: usize = 12 - 4;

const _: () = assert!(GOM_HEADER_EXTRA_BYTES.is_multiple_of(4) && GOM_REF_EXTRA_BYTES == 8);

/// How the generator sizes objects: a layout setting, not one of OO7's parameters. See the
/// module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Padding {
    /// Thor's sizes: the declared layouts.
    #[default]
    None,
    /// GOM's sizes (HAC-BIG): every OO7 class's fixed part extended by
    /// [`GOM_HEADER_EXTRA_BYTES`] plus [`GOM_REF_EXTRA_BYTES`] per reference slot.
    Gom,
}

impl Padding {
    /// Bytes this padding adds to every instance of `declared`.
    pub fn extra_bytes(self, declared: &thor_core::ClassDesc) -> usize {
        match self {
            Padding::None => 0,
            Padding::Gom => {
                GOM_HEADER_EXTRA_BYTES + GOM_REF_EXTRA_BYTES * declared.ref_slots().len()
            }
        }
    }

    /// The class stored for `declared` with this padding: `declared` itself, or a class that
    /// extends it.
    pub fn stored(self, declared: &thor_core::ClassDesc) -> thor_core::ClassDesc {
        declared
            .extended_by(self.extra_bytes(declared))
            .expect("every padded OO7 class fits the fixed-part bound (schema tests)")
    }

    /// The name `thor oo7 load` prints.
    pub fn name(self) -> &'static str {
        match self {
            Padding::None => "none",
            Padding::Gom => "gom",
        }
    }

    /// The padding of the database a session is connected to: the one whose layout of
    /// `oo7.AtomicPart` is the stored one. `Ok(None)` if the database stores no such class, or
    /// stores it with a layout neither padding gives.
    pub fn of_database(
        s: &thor_client::Session,
    ) -> Result<Option<Padding>, thor_client::ClientError> {
        use thor_client::Class;
        let Some(stored) = s.stored_class::<AtomicPart>()? else { return Ok(None) };
        let declared = AtomicPart::desc();
        Ok([Padding::None, Padding::Gom].into_iter().find(|p| p.stored(&declared) == stored))
    }
}

/// The descriptors of every OO7 class, in the order their class objects are created.
pub fn classes() -> Vec<thor_core::ClassDesc> {
    use thor_client::Class;
    vec![
        Module::desc(),
        Manual::desc(),
        ComplexAssembly::desc(),
        BaseAssembly::desc(),
        CompositePart::desc(),
        Document::desc(),
        AtomicPart::desc(),
        Connection::desc(),
        ParamsObj::desc(),
        Index::desc(),
        IndexNode::desc(),
    ]
}

/// The classes a database generated with `padding` stores, in [`classes`]' order.
pub fn stored_classes(padding: Padding) -> Vec<thor_core::ClassDesc> {
    classes().iter().map(|d| padding.stored(d)).collect()
}

/// The `type` string of type number `t` ("type00t", zero-padded to [`TYPE_BYTES`]).
pub fn type_string(t: u32) -> [u8; TYPE_BYTES] {
    let mut b = [0u8; TYPE_BYTES];
    let s = format!("type{t:03}");
    b[..s.len()].copy_from_slice(s.as_bytes());
    b
}

/// The title of composite part `cp`'s document.
pub fn document_title(cp: u32) -> [u8; TITLE_BYTES] {
    let mut b = [0u8; TITLE_BYTES];
    let s = format!("Composite Part {cp:08}");
    b[..s.len()].copy_from_slice(s.as_bytes());
    b
}

/// The title of module `m`'s manual.
pub fn manual_title(m: u32) -> [u8; TITLE_BYTES] {
    let mut b = [0u8; TITLE_BYTES];
    let s = format!("Manual for module {m:08}");
    b[..s.len()].copy_from_slice(s.as_bytes());
    b
}

/// The first sentence of a document. `"I am   "` and `"This is"` have the same length, so T5
/// can swap them in place (objects keep their size).
pub fn document_text(cp: u32, len: usize) -> Vec<u8> {
    text(&format!("I am   the documentation for composite part {cp:08}.\n"), len)
}

/// A manual's text.
pub fn manual_text(m: u32, len: usize) -> Vec<u8> {
    text(&format!("I am   the manual for module {m:08}.\n"), len)
}

fn text(sentence: &str, len: usize) -> Vec<u8> {
    sentence.bytes().cycle().take(len).collect()
}

/// The 64-bit key of a title in the title index: FNV-1a.
pub fn title_key(title: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in title {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The date index's key of an atomic part: date in the high half so that keys sort by date,
/// the id in the low half so that keys are unique.
pub fn date_key(date: u32, id: u32) -> u64 {
    (u64::from(date) << 32) | u64::from(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use thor_client::Class;

    #[test]
    fn layouts_have_the_documented_sizes() {
        let size = |d: thor_core::ClassDesc| d.object_bytes(0);
        assert_eq!(size(Module::desc()), 28);
        assert_eq!(size(Manual::desc()), 56);
        assert_eq!(size(ComplexAssembly::desc()), 28);
        assert_eq!(size(BaseAssembly::desc()), 32);
        assert_eq!(size(CompositePart::desc()), 36);
        assert_eq!(size(Document::desc()), 56);
        assert_eq!(size(AtomicPart::desc()), 40);
        assert_eq!(size(Connection::desc()), 20);
        assert_eq!(&type_string(3), b"type003\0\0\0");
    }

    #[test]
    fn gom_padding_adds_a_header_and_a_reference_s_worth_per_slot() {
        // The table of the module documentation: (class, header and fixed part with Thor's
        // sizes, the same padded).
        let want = [
            ("oo7.Module", 28, 68),
            ("oo7.Manual", 56, 80),
            ("oo7.ComplexAssembly", 28, 68),
            ("oo7.BaseAssembly", 32, 80),
            ("oo7.CompositePart", 36, 92),
            ("oo7.Document", 56, 80),
            ("oo7.AtomicPart", 40, 80),
            ("oo7.Connection", 20, 52),
            ("oo7.Params", 64, 72),
            ("oo7.Index", 16, 32),
            ("oo7.IndexNode", 524, 532),
        ];
        let (plain, padded) = (stored_classes(Padding::None), stored_classes(Padding::Gom));
        assert_eq!(plain, classes());
        for ((d, p), (name, thor, gom)) in plain.iter().zip(&padded).zip(want) {
            assert_eq!(d.name(), name);
            assert_eq!(4 + d.fixed_bytes(), thor, "{name}");
            assert_eq!(4 + p.fixed_bytes(), gom, "{name}");
            assert_eq!(p.object_bytes(3) - d.object_bytes(3), gom - thor, "{name}");
            assert!(p.extends(d), "{name}");
        }
        assert_eq!(document_text(7, 20).len(), 20);
    }
}
