//! Fair shares of the tables callers fill: MCP sessions, continuations, watch streams. No caller
//! may take a table from the others: one that holds its share makes room from its own oldest
//! entries, and a full table makes room from whoever holds the most, so another caller can
//! always get an entry.

use std::collections::HashMap;

/// The entry to drop so that `newcomer` may add one, if any must go: `newcomer`'s own oldest
/// when it holds `share` already, else, when the table holds `capacity`, the oldest entry of
/// the principal that holds the most. `entries` yields each entry's key, principal and age
/// (smaller is older).
pub fn make_room<'a, K: ?Sized, A: Ord + Copy>(
    entries: impl Iterator<Item = (&'a K, &'a str, A)>,
    newcomer: &str,
    share: usize,
    capacity: usize,
) -> Option<&'a K> {
    // Per principal: how many it holds and its oldest entry.
    let mut held: HashMap<&str, (usize, &K, A)> = HashMap::new();
    let mut total = 0usize;
    for (key, principal, age) in entries {
        total += 1;
        let slot = held.entry(principal).or_insert((0, key, age));
        slot.0 += 1;
        if age < slot.2 {
            (slot.1, slot.2) = (key, age);
        }
    }
    if let Some((count, oldest, _)) = held.get(newcomer)
        && *count >= share
    {
        return Some(*oldest);
    }
    if total < capacity {
        return None;
    }
    held.values().max_by_key(|(count, _, age)| (*count, std::cmp::Reverse(*age))).map(|(_, oldest, _)| *oldest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room(entries: &[(u32, &'static str, u32)], newcomer: &str, share: usize, capacity: usize) -> Option<u32> {
        make_room(entries.iter().map(|(key, who, age)| (key, *who, *age)), newcomer, share, capacity).copied()
    }

    #[test]
    fn a_caller_at_its_share_gives_up_its_own_oldest() {
        let table = [(1, "a", 5), (2, "a", 3), (3, "b", 1)];
        assert_eq!(room(&table, "a", 2, 10), Some(2));
        assert_eq!(room(&table, "b", 2, 10), None, "b is under its share and the table has room");
    }

    #[test]
    fn a_full_table_makes_room_from_the_biggest_holder_never_refusing() {
        let table = [(1, "a", 5), (2, "a", 3), (3, "b", 1), (4, "c", 0)];
        assert_eq!(room(&table, "d", 3, 4), Some(2), "a holds the most: its oldest goes");
        assert_eq!(room(&table, "b", 3, 4), Some(2));
        assert_eq!(room(&[], "a", 1, 0), None);
    }

    proptest::proptest! {
        #[test]
        fn nobody_is_ever_refused_and_nobody_exceeds_its_share(arrivals in proptest::collection::vec(0u8..5, 1..400)) {
            let (share, capacity) = (8usize, 20usize);
            let mut table: Vec<(u32, String, u32)> = Vec::new();
            for (age, who) in arrivals.iter().enumerate() {
                let who = format!("p{who}");
                let age = u32::try_from(age).unwrap();
                let evict = make_room(table.iter().map(|(k, p, a)| (k, p.as_str(), *a)), &who, share, capacity).copied();
                if let Some(evict) = evict {
                    table.retain(|(k, _, _)| *k != evict);
                }
                proptest::prop_assert!(table.len() < capacity);
                table.push((age, who.clone(), age));
                proptest::prop_assert!(table.iter().filter(|(_, p, _)| *p == who).count() <= share);
            }
        }
    }
}
