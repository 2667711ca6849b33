package fencedynamo_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencedynamo"
)

// TestCreateTableOption: without WithCreateTable a missing table is an
// error that says so, and nothing is created; with it, the first
// acquisition creates the table; CreateTable makes it too, and leaves an
// existing one as it is.
func TestCreateTableOption(t *testing.T) {
	ctx := testCtx(t)
	connect := server(t)
	plain := mustOpen(t, connect, func(*fencedynamo.Store) {}) // no WithCreateTable
	_, err := plain.TryAcquire(ctx, req("k", "owner-a"))
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "WithCreateTable") {
		t.Errorf("TryAcquire on a missing table without WithCreateTable: %v; want a ResourceNotFoundException saying what to do", err)
	}
	if _, err := plain.List(ctx, ""); !errors.As(err, &nf) {
		t.Errorf("List on a missing table: %v; want ResourceNotFoundException", err)
	}

	creating := mustOpen(t, connect, fencedynamo.WithCreateTable())
	c, err := creating.TryAcquire(ctx, req("k", "owner-b"))
	if err != nil {
		t.Fatalf("TryAcquire on a missing table with WithCreateTable: %v", err)
	}
	if _, err := plain.TryAcquire(ctx, req("k", "owner-a")); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryAcquire of the held key in the table made: %v; want ErrHeld", err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := plain.CreateTable(ctx); err != nil {
		t.Errorf("CreateTable of an existing table: %v", err)
	}
	c, err = plain.TryAcquire(ctx, req("k", "owner-a"))
	if err != nil {
		t.Fatalf("TryAcquire after CreateTable of the existing table: %v (was the table made again, empty?)", err)
	}
	if err := c.Release(ctx); err != nil {
		t.Error(err)
	}

	other := mustOpen(t, strings.Replace(connect, "fence-", "other-", 1), func(*fencedynamo.Store) {})
	if err := other.CreateTable(ctx); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	if c, err := other.TryAcquire(ctx, req("k", "owner-a")); err != nil {
		t.Errorf("TryAcquire in the table CreateTable made: %v", err)
	} else if err := c.Release(ctx); err != nil {
		t.Error(err)
	}
}
