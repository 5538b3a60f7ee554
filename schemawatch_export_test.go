package pronto

import "time"

// SetSchemaWatchEvery replaces, before Start, how often c reads the schema's newer migrations.
func SetSchemaWatchEvery(c *Client, d time.Duration) { c.schemaWatch.every = d }

// SchemaWatchPasses counts the reads of the schema's newer migrations c has done.
func SchemaWatchPasses(c *Client) int64 { return c.schemaWatch.passes.Load() }
