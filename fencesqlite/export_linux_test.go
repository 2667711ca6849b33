package fencesqlite

// FSName is fsName, for the test of the network file system check.
var FSName = fsName
