package fencemysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemysql"
)

// Acquire a key on MySQL or MariaDB and work under the lease: its context
// ends the moment the lock's connection does.
func ExampleNew() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(db.internal:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	// Each held lease uses two connections: room for 10 leases at once,
	// kept open between leases.
	db.SetMaxOpenConns(20)
	db.SetMaxIdleConns(20)
	drv, err := fencemysql.New(db, fencemysql.WithAutoSetup())
	if err != nil {
		log.Fatal(err)
	}
	defer drv.Close()

	c := fence.New(drv, fence.WithTTL(30*time.Second))
	lease, err := c.Acquire(ctx, "nightly-invoices")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())
	fmt.Println("token", lease.Token())
}

func ExampleLockName() {
	fmt.Println(fencemysql.LockName("", "reports/daily"))
	fmt.Println(len(fencemysql.LockName("", "Reports/Daily")))
	// Output:
	// fence:reports/daily
	// 58
}
