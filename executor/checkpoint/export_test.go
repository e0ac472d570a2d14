package checkpoint

// Dir is s's directory, for the tests' looks into the store.
func Dir(s *Store) string { return s.dir }
