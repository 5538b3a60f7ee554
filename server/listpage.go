package server

import (
	"net/url"
	"slices"
	"strings"
)

// Pagination of the data-plane lists that are read whole from the store and kept in name order
// (queues, cron registrations): limit, offset and cursor, as ojs-http-binding.md 17 asks of every
// list and as the dead-letter list reads them.

// namePage is a page request: at most limit items after the name cursor, skipping offset of them.
type namePage struct {
	limit, offset int
	cursor        string
}

// readNamePage reads limit (50 by default, at most 200), offset and cursor. valid tells a name the
// list could hold: a cursor that is not one is refused, naming the parameter.
func readNamePage(q url.Values, valid func(string) bool) (namePage, *apiError) {
	var p namePage
	var e *apiError
	if p.limit, e = queryInt(q, "limit", 50, 1, 200); e != nil {
		return p, e
	}
	if p.offset, e = queryInt(q, "offset", 0, 0, 1<<30); e != nil {
		return p, e
	}
	p.cursor = q.Get("cursor")
	if p.cursor != "" && !valid(p.cursor) {
		return p, invalid("cursor", "cursor %q: not a name this list returns (pass the next_cursor of the previous page)", p.cursor)
	}
	return p, nil
}

// pageByName sorts items by name and returns the page p asks for, whether more items follow it, and
// the cursor of the next page (the last name returned) when they do.
func pageByName[T any](items []T, name func(T) string, p namePage) (page []T, hasMore bool, next string) {
	slices.SortFunc(items, func(a, b T) int { return strings.Compare(name(a), name(b)) })
	if p.cursor != "" {
		// Names are unique: the page starts after the cursor, even if that item has gone since.
		i, _ := slices.BinarySearchFunc(items, p.cursor, func(it T, c string) int { return strings.Compare(name(it), c) })
		if i < len(items) && name(items[i]) == p.cursor {
			i++
		}
		items = items[i:]
	}
	items = items[min(p.offset, len(items)):]
	if len(items) > p.limit {
		return items[:p.limit], true, name(items[p.limit-1])
	}
	return items, false, ""
}

// appendNamePagination appends the pagination object of a page of total items.
func appendNamePagination(b []byte, total int, p namePage, hasMore bool, next string) []byte {
	b = append(appendKey(b, "pagination"), '{')
	b = appendIntField(b, "total", int64(total))
	b = appendIntField(b, "limit", int64(p.limit))
	b = appendIntField(b, "offset", int64(p.offset))
	b = appendBoolField(b, "has_more", hasMore)
	if hasMore {
		b = appendStringField(b, "next_cursor", next)
	}
	return append(b, '}')
}
