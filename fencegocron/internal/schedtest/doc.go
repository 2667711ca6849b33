// Package schedtest runs fencegocron on several schedulers, each in a
// process of its own, against a real Redis: the done-means test.
// It is a module of its own so that fencegocron's go.mod does not require
// a store (fenceredis and go-redis) for its users.
package schedtest
