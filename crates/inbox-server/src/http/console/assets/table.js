// A dense data table: sortable by any column (click a header; again to reverse), with an
// optional checkbox column for bulk actions. Cells are built by the columns from the rows.

import { el } from "./dom.js";

/**
 * `columns`: [{ key, label, numeric?, sortValue?(row), cell?(row), title? }]
 * `sort`: { key, descending } (mutated on clicks, then `onChange()` re-renders)
 * `selection`: a Set of row keys, or undefined for no checkboxes; `rowKey(row)` names a row.
 */
export function dataTable({ columns, rows, sort, onChange, selection, rowKey, empty = "Nothing here.", rowClass }) {
  const sorted = sortRows(rows, columns, sort);
  const head = el("tr", {});
  if (selection) {
    const all = sorted.length > 0 && sorted.every((row) => selection.has(rowKey(row)));
    head.append(
      el("th", { class: "check" },
        el("input", {
          type: "checkbox",
          "aria-label": "Select all",
          checked: all,
          disabled: sorted.length === 0,
          on: {
            change: (event) => {
              for (const row of sorted) {
                if (event.target.checked) selection.add(rowKey(row));
                else selection.delete(rowKey(row));
              }
              onChange();
            },
          },
        })),
    );
  }
  for (const column of columns) {
    const active = sort && sort.key === column.key;
    const ariaSort = active ? (sort.descending ? "descending" : "ascending") : "none";
    const label = column.sortable === false
      ? column.label
      : el("button", {
          type: "button",
          class: "sort",
          title: column.title,
          on: {
            click: () => {
              if (sort.key === column.key) sort.descending = !sort.descending;
              else Object.assign(sort, { key: column.key, descending: Boolean(column.numeric) });
              onChange();
            },
          },
        }, column.label, el("span", { class: "arrow", "aria-hidden": "true" }, active ? (sort.descending ? "▼" : "▲") : ""));
    head.append(el("th", { class: column.numeric ? "num" : undefined, "aria-sort": ariaSort, scope: "col" }, label));
  }
  const body = el("tbody", {});
  for (const row of sorted) {
    const tr = el("tr", { class: rowClass?.(row) });
    if (selection) {
      const key = rowKey(row);
      tr.dataset.key = key;
      tr.append(el("td", { class: "check" }, el("input", {
        type: "checkbox",
        "aria-label": "Select",
        checked: selection.has(key),
        on: {
          change: (event) => {
            if (event.target.checked) selection.add(key);
            else selection.delete(key);
            onChange();
          },
        },
      })));
    }
    for (const column of columns) {
      const content = column.cell ? column.cell(row) : row[column.key];
      tr.append(el("td", { class: column.numeric ? "num" : column.class }, content ?? "—"));
    }
    body.append(tr);
  }
  if (sorted.length === 0) {
    body.append(el("tr", {}, el("td", { class: "empty", colspan: columns.length + (selection ? 1 : 0) }, empty)));
  }
  return el("table", { class: "grid" }, el("thead", {}, head), body);
}

function sortRows(rows, columns, sort) {
  if (!sort || !sort.key) return rows;
  const column = columns.find((c) => c.key === sort.key);
  if (!column) return rows;
  const value = column.sortValue ?? ((row) => row[column.key]);
  const direction = sort.descending ? -1 : 1;
  return [...rows].sort((a, b) => {
    const x = value(a);
    const y = value(b);
    // Missing values sort last either way.
    if (x === undefined || x === null) return y === undefined || y === null ? 0 : 1;
    if (y === undefined || y === null) return -1;
    if (typeof x === "number" && typeof y === "number") return (x - y) * direction;
    return String(x).localeCompare(String(y), undefined, { numeric: true }) * direction;
  });
}
