package pronto

import (
	"context"
	"errors"
	"fmt"

	"github.com/pronto-jobs/pronto/store"
)

// checkSchema fails when the store's schema does not match this binary's migrations (see
// store.SchemaChecker). Once it passed it is not asked again at start; a started client watches for
// incompatible newer migrations instead (schemawatch.go).
func (c *Client) checkSchema(ctx context.Context) error {
	sc, ok := c.store.(store.SchemaChecker)
	if !ok || c.schemaOK.Load() {
		return nil
	}
	if err := sc.CheckSchema(ctx); err != nil {
		return fmt.Errorf("pronto: %w", err)
	}
	c.schemaOK.Store(true)
	return nil
}

// schemaCause explains a failed write by the schema when the schema is at fault: an insert on an
// unmigrated database otherwise reports the driver's `relation "x.jobs" does not exist`. A client
// that never started checks here, once: after a check passed, err is returned as it is.
func (c *Client) schemaCause(ctx context.Context, err error) error {
	sc, ok := c.store.(store.SchemaChecker)
	if err == nil || !ok || c.schemaOK.Load() {
		return err
	}
	cerr := sc.CheckSchema(ctx) // a cancelled ctx fails the check, and err stands
	var se *store.SchemaError
	switch {
	case errors.As(cerr, &se):
		return cerr
	case cerr == nil:
		c.schemaOK.Store(true)
	}
	return err
}
