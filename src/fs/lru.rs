//! A bounded map from string keys to values, evicting the least recently used: the list
//! behind the file cache ([`super::cache::FileCache`]) and the on-demand variant cache
//! (`crate::ondemand::VariantCache`).
//!
//! Each value has a weight (bytes of mapping, rendering or compressed output). The map is
//! bounded by entries and by total weight, and holds, after every call:
//!
//! - `len() <= max_entries()` and `weight() <= max_weight()`;
//! - `weight()` is the sum of the entries' weights;
//! - the entries form one list, most recently used first: [`Lru::insert`],
//!   [`Lru::touch`] and [`Lru::set_weight`] move an entry to the front, and eviction takes
//!   from the back. [`Lru::find`], [`Lru::get`] and [`Lru::get_mut`] do not reorder.
//!
//! Entries are addressed by a handle (`usize`) valid until that entry is removed or evicted;
//! a handle is never kept across calls that may evict another entry.

use std::collections::HashMap;
use std::hash::BuildHasher;

/// The map's hasher: aHash with keys drawn from std's per-process random SipHash keys. The
/// keys are paths a client chooses (404s are cached too), so the hash must stay keyed; std's
/// SipHash-1-3 cost about 210 instructions per request on a 7-byte path, aHash a fraction of
/// that.
type Keyed = ahash::RandomState;

fn keyed() -> Keyed {
    let std = std::collections::hash_map::RandomState::new();
    let seed = |i: u64| std.hash_one(i);
    ahash::RandomState::with_seeds(seed(0), seed(1), seed(2), seed(3))
}

const NIL: usize = usize::MAX;

struct Node<V> {
    key: Box<str>,
    value: V,
    weight: u64,
    prev: usize,
    next: usize,
}

pub struct Lru<V> {
    map: HashMap<Box<str>, usize, Keyed>,
    nodes: slab::Slab<Node<V>>,
    /// Most recently used end of the list.
    head: usize,
    tail: usize,
    weight: u64,
    max_entries: usize,
    max_weight: u64,
}

impl<V> Lru<V> {
    pub fn new(max_entries: usize, max_weight: u64) -> Lru<V> {
        Lru {
            map: HashMap::with_hasher(keyed()),
            nodes: slab::Slab::new(),
            head: NIL,
            tail: NIL,
            weight: 0,
            max_entries,
            max_weight,
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The sum of the entries' weights.
    pub fn weight(&self) -> u64 {
        self.weight
    }

    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    pub fn max_weight(&self) -> u64 {
        self.max_weight
    }

    /// Whether a value of `weight` would be kept by [`Lru::insert`].
    pub fn can_hold(&self, weight: u64) -> bool {
        self.max_entries > 0 && weight <= self.max_weight
    }

    /// The handle of `key`'s entry; its place in the list does not change. The entry used
    /// last (the front of the list) is compared first: a client that asks for one file
    /// again and again, over one connection or many, is answered without hashing its path
    /// (about 100 instructions of a keep-alive request of 4,200, callgrind), for one length
    /// comparison when the key is another.
    #[inline]
    pub fn find(&self, key: &str) -> Option<usize> {
        if let Some(front) = self.nodes.get(self.head) {
            if *front.key == *key {
                return Some(self.head);
            }
        }
        self.map.get(key).copied()
    }

    #[inline]
    pub fn get(&self, i: usize) -> &V {
        &self.nodes[i].value
    }

    #[inline]
    pub fn get_mut(&mut self, i: usize) -> &mut V {
        &mut self.nodes[i].value
    }

    pub fn weight_of(&self, i: usize) -> u64 {
        self.nodes[i].weight
    }

    /// The first entry (in no particular order) whose value satisfies `pred`.
    pub fn position(&self, mut pred: impl FnMut(&V) -> bool) -> Option<usize> {
        self.nodes.iter().find(|(_, n)| pred(&n.value)).map(|(i, _)| i)
    }

    /// Marks entry `i` as just used.
    #[inline]
    pub fn touch(&mut self, i: usize) {
        if self.head != i {
            self.unlink(i);
            self.link_front(i);
        }
    }

    /// Stores `value` under `key` (replacing an entry of that key) as the most recently used,
    /// evicting the least recently used entries to make room. A value that cannot be kept
    /// ([`Lru::can_hold`]) is dropped: `None`.
    pub fn insert(&mut self, key: &str, value: V, weight: u64) -> Option<usize> {
        if let Some(i) = self.find(key) {
            self.remove(i);
        }
        if !self.can_hold(weight) {
            return None;
        }
        while self.nodes.len() >= self.max_entries || self.weight + weight > self.max_weight {
            self.remove(self.tail);
        }
        let key: Box<str> = key.into();
        let i = self.nodes.insert(Node { key: key.clone(), value, weight, prev: NIL, next: NIL });
        self.weight += weight;
        self.map.insert(key, i);
        self.link_front(i);
        Some(i)
    }

    /// Gives entry `i` a new weight and marks it as just used, evicting other entries (least
    /// recently used first) to make room. False, and nothing changed, when `weight` alone is
    /// over the bound.
    pub fn set_weight(&mut self, i: usize, weight: u64) -> bool {
        if weight > self.max_weight {
            return false;
        }
        self.touch(i);
        self.weight = self.weight - self.nodes[i].weight + weight;
        self.nodes[i].weight = weight;
        // `i` is at the front: the back is another entry while the total is over the bound.
        while self.weight > self.max_weight {
            self.remove(self.tail);
        }
        true
    }

    /// New bounds, evicting the least recently used entries until they hold.
    pub fn set_bounds(&mut self, max_entries: usize, max_weight: u64) {
        self.max_entries = max_entries;
        self.max_weight = max_weight;
        while self.nodes.len() > max_entries || self.weight > max_weight {
            self.remove(self.tail);
        }
    }

    /// Removes entry `i`, returning its value.
    pub fn remove(&mut self, i: usize) -> V {
        self.unlink(i);
        let node = self.nodes.remove(i);
        self.weight -= node.weight;
        self.map.remove(&node.key);
        node.value
    }

    fn link_front(&mut self, i: usize) {
        self.nodes[i].prev = NIL;
        self.nodes[i].next = self.head;
        if self.head != NIL {
            self.nodes[self.head].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = (self.nodes[i].prev, self.nodes[i].next);
        if prev != NIL {
            self.nodes[prev].next = next;
        } else {
            self.head = next;
        }
        if next != NIL {
            self.nodes[next].prev = prev;
        } else {
            self.tail = prev;
        }
        self.nodes[i].prev = NIL;
        self.nodes[i].next = NIL;
    }

    /// The keys, most recently used first (walking the list), for checking the invariants.
    #[cfg(test)]
    pub(crate) fn keys_by_recency(&self) -> Vec<&str> {
        let mut keys = Vec::with_capacity(self.len());
        let (mut i, mut last) = (self.head, NIL);
        while i != NIL {
            assert_eq!(self.nodes[i].prev, last, "the list is linked both ways");
            assert_eq!(self.map.get(&self.nodes[i].key), Some(&i), "the map names the node");
            keys.push(&*self.nodes[i].key);
            last = i;
            i = self.nodes[i].next;
        }
        assert_eq!(last, self.tail);
        assert_eq!((keys.len(), self.map.len()), (self.nodes.len(), self.nodes.len()), "every node once");
        keys
    }

    /// Every invariant of the module documentation.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        self.keys_by_recency();
        assert!(self.len() <= self.max_entries, "{} entries over {}", self.len(), self.max_entries);
        assert!(self.weight <= self.max_weight, "{} over {}", self.weight, self.max_weight);
        assert_eq!(self.nodes.iter().map(|(_, n)| n.weight).sum::<u64>(), self.weight);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn order(l: &Lru<u32>) -> Vec<&str> {
        l.check();
        l.keys_by_recency()
    }

    #[test]
    fn evicts_the_least_recently_used_by_entries() {
        let mut l = Lru::new(3, 1000);
        for (n, k) in ["a", "b", "c"].into_iter().enumerate() {
            l.insert(k, n as u32, 1);
        }
        assert_eq!(order(&l), ["c", "b", "a"]);
        // `find` and `get` do not reorder; `touch` does.
        let a = l.find("a").unwrap();
        assert_eq!(*l.get(a), 0);
        assert_eq!(order(&l), ["c", "b", "a"]);
        l.touch(a);
        assert_eq!(order(&l), ["a", "c", "b"]);
        l.insert("d", 3, 1);
        assert_eq!(order(&l), ["d", "a", "c"]);
        assert_eq!(l.find("b"), None);
    }

    #[test]
    fn evicts_by_weight_and_refuses_what_cannot_fit() {
        let mut l = Lru::new(10, 250);
        l.insert("a", 0, 100);
        l.insert("b", 1, 100);
        l.insert("c", 2, 100);
        assert_eq!((order(&l), l.weight()), (vec!["c", "b"], 200));
        assert!(l.insert("big", 3, 251).is_none(), "alone over the bound");
        assert_eq!((order(&l), l.weight()), (vec!["c", "b"], 200), "and nothing evicted for it");
        // Replacing a key's value replaces its weight.
        l.insert("b", 4, 50);
        assert_eq!((order(&l), l.weight()), (vec!["b", "c"], 150));
        assert_eq!(*l.get(l.find("b").unwrap()), 4);
        assert!(Lru::<u32>::new(0, 100).insert("x", 0, 0).is_none());
        assert!(!Lru::<u32>::new(0, 100).can_hold(0) && Lru::<u32>::new(1, 0).can_hold(0));
    }

    #[test]
    fn set_weight_makes_room_but_keeps_the_entry() {
        let mut l = Lru::new(10, 300);
        for k in ["a", "b", "c"] {
            l.insert(k, 0, 0);
        }
        let a = l.find("a").unwrap();
        assert!(l.set_weight(a, 200));
        assert_eq!(order(&l), ["a", "c", "b"]);
        let b = l.find("b").unwrap();
        // 200 + 150 > 300: the back goes first ("c", weightless, which is not enough), then "a".
        assert!(l.set_weight(b, 150));
        assert_eq!((order(&l), l.weight()), (vec!["b"], 150));
        assert!(!l.set_weight(b, 301));
        assert_eq!((order(&l), l.weight()), (vec!["b"], 150), "refused: nothing changed");
        l.insert("d", 0, 0);
        assert!(l.set_weight(b, 300));
        assert_eq!((order(&l), l.weight_of(b)), (vec!["b", "d"], 300), "the weightless entry stays");
    }

    #[test]
    fn remove_bounds_and_position() {
        let mut l = Lru::new(5, 100);
        for (n, k) in ["a", "b", "c", "d"].into_iter().enumerate() {
            l.insert(k, n as u32, 10);
        }
        let c = l.position(|&v| v == 2).unwrap();
        assert_eq!(l.remove(c), 2);
        assert_eq!((order(&l), l.weight()), (vec!["d", "b", "a"], 30));
        *l.get_mut(l.find("a").unwrap()) = 9;
        assert_eq!(l.position(|&v| v == 9), l.find("a"));
        l.set_bounds(2, 100);
        assert_eq!(order(&l), ["d", "b"]);
        l.set_bounds(5, 15);
        assert_eq!(order(&l), ["d"]);
        l.set_bounds(0, 0);
        assert!(l.is_empty() && l.weight() == 0);
        order(&l);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u16),
        Touch(u8),
        Remove(u8),
        SetWeight(u8, u16),
        Bounds(u8, u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..16, 0u16..400).prop_map(|(k, w)| Op::Insert(k, w)),
            2 => (0u8..16).prop_map(Op::Touch),
            1 => (0u8..16).prop_map(Op::Remove),
            2 => (0u8..16, 0u16..400).prop_map(|(k, w)| Op::SetWeight(k, w)),
            1 => (0u8..10, 0u16..1500).prop_map(|(n, w)| Op::Bounds(n, w)),
        ]
    }

    /// The same rules on a plain list, most recently used first: (key, weight).
    struct Model {
        list: Vec<(String, u64)>,
        max_entries: usize,
        max_weight: u64,
    }

    impl Model {
        fn total(&self) -> u64 {
            self.list.iter().map(|e| e.1).sum()
        }
        fn take(&mut self, k: &str) -> Option<(String, u64)> {
            let at = self.list.iter().position(|e| e.0 == k)?;
            Some(self.list.remove(at))
        }
        fn shrink(&mut self, entries: usize) {
            while self.list.len() > entries || self.total() > self.max_weight {
                self.list.pop();
            }
        }
    }

    proptest! {
        /// Whatever the operations, the bounds and the accounting hold, and the order is the
        /// order of use (checked against the plain list).
        #[test]
        fn bounds_and_recency_order_hold(ops in proptest::collection::vec(op(), 1..300)) {
            let mut l: Lru<u8> = Lru::new(6, 1000);
            let mut m = Model { list: Vec::new(), max_entries: 6, max_weight: 1000 };
            for op in ops {
                match op {
                    Op::Insert(k, w) => {
                        let (key, w) = (k.to_string(), u64::from(w));
                        let kept = l.insert(&key, k, w);
                        m.take(&key);
                        if m.max_entries > 0 && w <= m.max_weight {
                            m.shrink(m.max_entries - 1);
                            while m.total() + w > m.max_weight {
                                m.list.pop();
                            }
                            m.list.insert(0, (key, w));
                            prop_assert!(kept.is_some());
                        } else {
                            prop_assert!(kept.is_none());
                        }
                    }
                    Op::Touch(k) => {
                        if let Some(i) = l.find(&k.to_string()) {
                            prop_assert_eq!(*l.get(i), k);
                            l.touch(i);
                            let e = m.take(&k.to_string()).unwrap();
                            m.list.insert(0, e);
                        }
                    }
                    Op::Remove(k) => {
                        if let Some(i) = l.find(&k.to_string()) {
                            prop_assert_eq!(l.remove(i), k);
                            m.take(&k.to_string()).unwrap();
                        }
                    }
                    Op::SetWeight(k, w) => {
                        if let Some(i) = l.find(&k.to_string()) {
                            let w = u64::from(w);
                            let fits = l.set_weight(i, w);
                            prop_assert_eq!(fits, w <= m.max_weight);
                            if fits {
                                let (key, _) = m.take(&k.to_string()).unwrap();
                                m.list.insert(0, (key, w));
                                m.shrink(usize::MAX);
                            }
                        }
                    }
                    Op::Bounds(n, w) => {
                        l.set_bounds(n.into(), w.into());
                        (m.max_entries, m.max_weight) = (n.into(), w.into());
                        m.shrink(m.max_entries);
                    }
                }
                l.check();
                let want: Vec<&str> = m.list.iter().map(|e| e.0.as_str()).collect();
                prop_assert_eq!(l.keys_by_recency(), want);
                prop_assert_eq!(l.weight(), m.total());
            }
        }
    }
}
