//! Typed access to the object's maps by their shared names (`profiler_common::names::maps`):
//! one place that turns a name into a map of the right kind, and a map error into a
//! [`BpfError`] naming the map.

use std::os::fd::{AsFd, BorrowedFd};

use aya::{
    Ebpf, Pod,
    maps::{Array, HashMap, Map, MapData, MapError, PerCpuArray},
};

use super::BpfError;

pub(super) fn map_err(name: &'static str) -> impl FnOnce(MapError) -> BpfError {
    move |source| BpfError::Map { name, source }
}

fn find<'a>(ebpf: &'a Ebpf, name: &'static str) -> Result<&'a Map, BpfError> {
    ebpf.map(name).ok_or(BpfError::Missing(name))
}

fn find_mut<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut Map, BpfError> {
    ebpf.map_mut(name).ok_or(BpfError::Missing(name))
}

/// The value of a one-entry configuration array.
pub(super) fn config<V: Pod>(ebpf: &Ebpf, name: &'static str) -> Result<V, BpfError> {
    let array: Array<_, V> = Array::try_from(find(ebpf, name)?).map_err(map_err(name))?;
    array.get(&0, 0).map_err(map_err(name))
}

/// Writes the value of a one-entry configuration array.
pub(super) fn set_config<V: Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
    value: V,
) -> Result<(), BpfError> {
    let mut array: Array<_, V> = Array::try_from(find_mut(ebpf, name)?).map_err(map_err(name))?;
    array.set(0, value, 0).map_err(map_err(name))
}

/// A hash map of the object, for reading.
pub(super) fn hash_map<'a, K: Pod, V: Pod>(
    ebpf: &'a Ebpf,
    name: &'static str,
) -> Result<HashMap<&'a MapData, K, V>, BpfError> {
    HashMap::try_from(find(ebpf, name)?).map_err(map_err(name))
}

/// Inserts (or replaces) `key` → `value` in a hash map.
pub(super) fn insert<K: Pod, V: Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
    key: K,
    value: V,
) -> Result<(), BpfError> {
    let mut map: HashMap<_, K, V> =
        HashMap::try_from(find_mut(ebpf, name)?).map_err(map_err(name))?;
    map.insert(key, value, 0).map_err(map_err(name))
}

/// Every entry of a hash map as it is now (failing on the first entry that cannot be read).
pub(super) fn entries<K: Pod, V: Pod>(
    ebpf: &Ebpf,
    name: &'static str,
) -> Result<Vec<(K, V)>, BpfError> {
    hash_map::<K, V>(ebpf, name)?
        .iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(map_err(name))
}

/// The fd of a perf event array, to store events in it.
pub(super) fn perf_event_array<'a>(
    ebpf: &'a Ebpf,
    name: &'static str,
) -> Result<BorrowedFd<'a>, BpfError> {
    match find(ebpf, name)? {
        Map::PerfEventArray(data) => Ok(data.fd().as_fd()),
        _ => Err(BpfError::Missing("sibling perf event array")),
    }
}

/// A per-CPU array of `u64` counters, read as sums over CPUs.
pub(super) struct Counters<'a> {
    name: &'static str,
    map: PerCpuArray<&'a MapData, u64>,
}

impl<'a> Counters<'a> {
    pub fn open(ebpf: &'a Ebpf, name: &'static str) -> Result<Self, BpfError> {
        let map = PerCpuArray::try_from(find(ebpf, name)?).map_err(map_err(name))?;
        Ok(Self { name, map })
    }

    /// Counter `slot` summed over CPUs.
    pub fn sum(&self, slot: u32) -> Result<u64, BpfError> {
        Ok(self
            .map
            .get(&slot, 0)
            .map_err(map_err(self.name))?
            .iter()
            .sum())
    }
}
