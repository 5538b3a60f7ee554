package postgres

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The job-returning statements (claims above all) decode their rows here, from the wire, rather
// than through rows.Scan: pgx plans the scan of every column for every result it reads, and a
// claim's result is one or a few rows of 31 columns, so that planning, with its allocations, cost
// about as much client CPU as the rest of the claim. A row decodes into the same jobRow that Scan
// fills, with the same values Scan would give; anything this decoder does not expect (a column
// type, text format, an infinite timestamp, a NULL array element, a codec the application
// replaced) falls back to Scan.

// jobColOIDs is the type of each column of jobCols, in order.
var jobColOIDs = [...]uint32{
	pgtype.UUIDOID, pgtype.TextOID, pgtype.TextOID, pgtype.JSONBOID, pgtype.JSONBOID, pgtype.Int4OID,
	pgtype.TextOID, pgtype.Int4OID, pgtype.Int4OID, pgtype.JSONBOID, pgtype.JSONBOID,
	pgtype.TextArrayOID, pgtype.JSONBOID, pgtype.Int8OID, pgtype.TimestamptzOID,
	pgtype.TimestamptzOID, pgtype.TimestamptzOID, pgtype.TimestamptzOID, pgtype.TimestamptzOID,
	pgtype.TimestamptzOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID,
	pgtype.TextOID, pgtype.UUIDArrayOID, pgtype.TextArrayOID, pgtype.TimestamptzOID, pgtype.TextOID,
	pgtype.JSONBOID, pgtype.UUIDOID,
}

// errDecode makes a row fall back to Scan.
var errDecode = errors.New("job row: not decodable without scan")

// jobDecoder decodes the rows of one result of jobCols.
type jobDecoder struct {
	// loc is where timestamps are returned, as pgx's timestamptz codec would (nil: local time).
	loc *time.Location
	// jsonbBinary tells which jsonb columns come in binary format (a version byte first).
	jsonbBinary [len(jobColOIDs)]bool
	// kind, queue, worker and tenant are the previous row's values: the rows of one claim mostly
	// share them, and a repeated value is not allocated again.
	kind, queue, worker, tenant pgtype.Text
}

// repeat decodes a text column, reusing the previous row's string *prev when the bytes are the
// same.
func repeat(b []byte, prev *pgtype.Text) pgtype.Text {
	if b == nil {
		return pgtype.Text{}
	}
	if !prev.Valid || prev.String != string(b) {
		*prev = pgtype.Text{String: string(b), Valid: true}
	}
	return *prev
}

// decState decodes the state column into the constant of its value, allocating nothing.
func decState(b []byte) pgtype.Text {
	if b == nil {
		return pgtype.Text{}
	}
	var st string
	switch string(b) {
	case "scheduled":
		st = "scheduled"
	case "available":
		st = "available"
	case "pending":
		st = "pending"
	case "active":
		st = "active"
	case "completed":
		st = "completed"
	case "retryable":
		st = "retryable"
	case "cancelled":
		st = "cancelled"
	case "discarded":
		st = "discarded"
	default:
		st = string(b)
	}
	return pgtype.Text{String: st, Valid: true}
}

// newJobDecoder returns a decoder for the result rows belongs to, or false when its columns are not
// jobCols in binary format or the connection's type map decodes timestamps in a way of its own.
func newJobDecoder(rows pgx.Rows) (jobDecoder, bool) {
	fields := rows.FieldDescriptions()
	if len(fields) != len(jobColOIDs) {
		return jobDecoder{}, false
	}
	var d jobDecoder
	for i, f := range fields {
		if f.DataTypeOID != jobColOIDs[i] {
			return jobDecoder{}, false
		}
		switch {
		case f.DataTypeOID == pgtype.TextOID: // the same bytes in either format
		case f.DataTypeOID == pgtype.JSONBOID: // pgx asks for text, the JSON itself
			d.jsonbBinary[i] = f.Format == pgtype.BinaryFormatCode
		case f.Format != pgtype.BinaryFormatCode:
			return jobDecoder{}, false
		}
	}
	conn := rows.Conn()
	if conn == nil {
		return jobDecoder{}, false
	}
	t, ok := conn.TypeMap().TypeForOID(pgtype.TimestamptzOID)
	if !ok {
		return jobDecoder{}, false
	}
	codec, ok := t.Codec.(*pgtype.TimestamptzCodec)
	if !ok {
		return jobDecoder{}, false
	}
	d.loc = codec.ScanLocation
	return d, true
}

// decode fills r from the raw binary values of one row.
func (d *jobDecoder) decode(v [][]byte, r *jobRow) error {
	if len(v) != len(jobColOIDs) {
		return errDecode
	}
	var err error
	fail := func(e error) {
		if err == nil && e != nil {
			err = e
		}
	}
	fail(decUUID(v[0], &r.id))
	r.kind = repeat(v[1], &d.kind)
	r.queue = repeat(v[2], &d.queue)
	var e error
	r.args, e = d.decJSONB(v, 3)
	fail(e)
	r.meta, e = d.decJSONB(v, 4)
	fail(e)
	fail(decInt4(v[5], &r.priority))
	r.state = decState(v[6])
	fail(decInt4(v[7], &r.attempt))
	fail(decInt4(v[8], &r.maxAttempts))
	r.errors, e = d.decJSONB(v, 9)
	fail(e)
	r.result, e = d.decJSONB(v, 10)
	fail(e)
	r.tags, e = decTextArray(v[11])
	fail(e)
	r.retryPolicy, e = d.decJSONB(v, 12)
	fail(e)
	fail(decInt8(v[13], &r.timeoutMS))
	fail(d.decTime(v[14], &r.createdAt))
	fail(d.decTime(v[15], &r.scheduledAt))
	fail(d.decTime(v[16], &r.startedAt))
	fail(d.decTime(v[17], &r.completedAt))
	fail(d.decTime(v[18], &r.expiresAt))
	fail(d.decTime(v[19], &r.leaseExpiresAt))
	r.workerID = repeat(v[20], &d.worker)
	r.uniqueKey = decText(v[21])
	r.tenant = repeat(v[22], &d.tenant)
	r.rateKey = decText(v[23])
	r.workflowID = decText(v[24])
	r.parentIDs, e = decUUIDArray(v[25])
	fail(e)
	r.uniqueStates, e = decTextArray(v[26])
	fail(e)
	fail(d.decTime(v[27], &r.uniqueUntil))
	r.runOn = decText(v[28])
	r.parentResults, e = d.decJSONB(v, 29)
	fail(e)
	fail(decUUID(v[30], &r.claimToken))
	return err
}

func decText(b []byte) pgtype.Text {
	if b == nil {
		return pgtype.Text{}
	}
	return pgtype.Text{String: string(b), Valid: true}
}

func decUUID(b []byte, u *pgtype.UUID) error {
	if b == nil {
		*u = pgtype.UUID{}
		return nil
	}
	if len(b) != 16 {
		return errDecode
	}
	*u = pgtype.UUID{Valid: true}
	copy(u.Bytes[:], b)
	return nil
}

func decInt4(b []byte, n *pgtype.Int4) error {
	if b == nil {
		*n = pgtype.Int4{}
		return nil
	}
	if len(b) != 4 {
		return errDecode
	}
	*n = pgtype.Int4{Int32: int32(binary.BigEndian.Uint32(b)), Valid: true}
	return nil
}

func decInt8(b []byte, n *pgtype.Int8) error {
	if b == nil {
		*n = pgtype.Int8{}
		return nil
	}
	if len(b) != 8 {
		return errDecode
	}
	*n = pgtype.Int8{Int64: int64(binary.BigEndian.Uint64(b)), Valid: true}
	return nil
}

// decJSONB copies jsonb column i out of the read buffer, which the next row reuses: the JSON text,
// after the version byte (1) in binary format.
func (d *jobDecoder) decJSONB(v [][]byte, i int) ([]byte, error) {
	b := v[i]
	if b == nil {
		return nil, nil
	}
	if d.jsonbBinary[i] {
		if len(b) == 0 || b[0] != 1 {
			return nil, errDecode
		}
		b = b[1:]
	}
	return append([]byte(nil), b...), nil
}

// microsecFromUnixEpochToY2K is the PostgreSQL epoch, 2000-01-01 UTC, in Unix microseconds.
const microsecFromUnixEpochToY2K = 946_684_800 * 1_000_000

// minTimestamp and maxTimestamp bound the finite timestamps decoded here (infinity and values pgx
// rejects fall back to Scan): years 1 to 9999, well inside what PostgreSQL and pgx both accept.
var (
	minTimestamp = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTimestamp = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// decTime decodes a binary timestamptz (microseconds since 2000-01-01 UTC) as pgx's codec does.
func (d *jobDecoder) decTime(b []byte, t *pgtype.Timestamptz) error {
	if b == nil {
		*t = pgtype.Timestamptz{}
		return nil
	}
	if len(b) != 8 {
		return errDecode
	}
	us := int64(binary.BigEndian.Uint64(b))
	tm := time.Unix(microsecFromUnixEpochToY2K/1_000_000+us/1_000_000,
		(microsecFromUnixEpochToY2K%1_000_000*1_000)+(us%1_000_000*1_000))
	if tm.Before(minTimestamp) || !tm.Before(maxTimestamp) {
		return errDecode
	}
	if d.loc != nil {
		tm = tm.In(d.loc)
	}
	*t = pgtype.Timestamptz{Time: tm, Valid: true}
	return nil
}

// arrayElems walks a one-dimensional binary array of element type oid, calling f with each
// element (nil for NULL). It returns the number of elements, -1 for a NULL array.
func arrayElems(b []byte, oid uint32, f func(i, n int, e []byte) error) (int, error) {
	if b == nil {
		return -1, nil
	}
	if len(b) < 12 {
		return 0, errDecode
	}
	ndim := binary.BigEndian.Uint32(b[0:4])
	if binary.BigEndian.Uint32(b[8:12]) != oid {
		return 0, errDecode
	}
	if ndim == 0 {
		return 0, nil
	}
	if ndim != 1 || len(b) < 20 {
		return 0, errDecode
	}
	n := int(int32(binary.BigEndian.Uint32(b[12:16])))
	if n < 0 || n > len(b) {
		return 0, errDecode
	}
	rest := b[20:]
	for i := range n {
		if len(rest) < 4 {
			return 0, errDecode
		}
		l := int32(binary.BigEndian.Uint32(rest[:4]))
		rest = rest[4:]
		var e []byte
		if l >= 0 {
			if int(l) > len(rest) {
				return 0, errDecode
			}
			e, rest = rest[:l:l], rest[l:]
		}
		if err := f(i, n, e); err != nil {
			return 0, err
		}
	}
	if len(rest) != 0 {
		return 0, errDecode
	}
	return n, nil
}

// decTextArray decodes a text[]: nil for NULL, empty (not nil) for an empty array, as pgx does. A
// NULL element, which pgx refuses to put in a []string, falls back to Scan.
func decTextArray(b []byte) ([]string, error) {
	var out []string
	n, err := arrayElems(b, pgtype.TextOID, func(i, n int, e []byte) error {
		if e == nil {
			return errDecode
		}
		if out == nil {
			out = make([]string, n)
		}
		out[i] = string(e)
		return nil
	})
	if err != nil || n < 0 {
		return nil, err
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// decUUIDArray decodes a uuid[]: nil for NULL, empty for an empty array, a NULL element invalid.
func decUUIDArray(b []byte) ([]pgtype.UUID, error) {
	var out []pgtype.UUID
	n, err := arrayElems(b, pgtype.UUIDOID, func(i, n int, e []byte) error {
		if out == nil {
			out = make([]pgtype.UUID, n)
		}
		return decUUID(e, &out[i])
	})
	if err != nil || n < 0 {
		return nil, err
	}
	if out == nil {
		out = []pgtype.UUID{}
	}
	return out, nil
}

// rawText reads column i of the current row as text, which text columns are in either format.
func rawText(rows pgx.Rows, i int) (string, bool) {
	fields := rows.FieldDescriptions()
	if i >= len(fields) || fields[i].DataTypeOID != pgtype.TextOID {
		return "", false
	}
	v := rows.RawValues()
	if i >= len(v) || v[i] == nil {
		return "", false
	}
	return string(v[i]), true
}
