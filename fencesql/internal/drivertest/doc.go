// Package drivertest runs fencesql's guard against real database/sql
// drivers: SQLite (modernc.org/sqlite), PostgreSQL (pgx's stdlib) and
// MySQL/MariaDB (go-sql-driver/mysql), on private servers.
//
// It is a module of its own so that those drivers stay out of fencesql's
// go.mod: a user who guards a PostgreSQL database through fencesql does
// not get the MySQL and SQLite drivers in their module graph.
package drivertest
