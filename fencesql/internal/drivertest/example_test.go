package drivertest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	_ "modernc.org/sqlite"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencesql"
)

// A write guarded in its own transaction: after a holder with token 34 has
// written, a paused old holder's write with token 33 is refused and rolled
// back.
func Example() {
	ctx := context.Background()
	db, _ := sql.Open("sqlite", "file:example?mode=memory&cache=shared")
	defer db.Close()
	db.Exec(`CREATE TABLE report (id INTEGER PRIMARY KEY, body TEXT)`)
	db.Exec(`INSERT INTO report VALUES (1, '')`)
	guard, _ := fencesql.New(fencesql.SQLite)
	guard.Setup(ctx, db)

	write := func(token int64, body string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := guard.Admit(ctx, tx, "report/1", token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE report SET body = ? WHERE id = 1`, body); err != nil {
			return err
		}
		return tx.Commit()
	}
	fmt.Println(write(34, "new holder"))
	err := write(33, "old holder, after a pause")
	fmt.Println(errors.Is(err, fence.ErrStale), err)

	var body string
	db.QueryRow(`SELECT body FROM report WHERE id = 1`).Scan(&body)
	fmt.Println(body)
	// Output:
	// <nil>
	// true fence: stale fencing token for "report/1": 33 is lower than the highest admitted, 34
	// new holder
}
