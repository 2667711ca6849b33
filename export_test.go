package fence

// MaxBatch is maxBatch, for the tests of renewal in batches.
const MaxBatch = maxBatch
