module github.com/fencing/fence/fencemysql

go 1.26.0

replace github.com/fencing/fence => ..

require github.com/go-sql-driver/mysql v1.10.1

require github.com/fencing/fence v0.0.0

require filippo.io/edwards25519 v1.2.0 // indirect
