// Package dirwatch wakes a waiter when files in a directory change, with
// Linux's inotify: the one watch the file and SQLite stores share. Stores
// say which events and which file names concern them; on other systems
// there is no watch and the Client polls.
package dirwatch
