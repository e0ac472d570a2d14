package checkpoint

// Dir is s's directory, for the tests' looks into the store.
func Dir(s *Store) string { return s.dir }

// SetAfterStat sets the hook run between an entry's stat and its reading
// (nil removes it).
func SetAfterStat(f func(rel string)) { afterStat = f }

// CollectEvery is collectEvery, for the bounds test.
const CollectEvery = collectEvery
