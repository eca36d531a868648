package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/trellis-repl/trellis-repl/engine"
)

func main() {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, os.Args[1])
	if err != nil {
		panic(err)
	}
	rows, _ := c.Query(ctx, "select name, plan from trellis.transforms order by id")
	for rows.Next() {
		var n string
		var p []byte
		rows.Scan(&n, &p)
		pl, err := engine.Decode(p)
		if err != nil {
			panic(err)
		}
		s := engine.BuildStatements(pl)
		fmt.Println(n, "\n ", s.EnumSourceFirst, "\n ", s.EnumSource, "\n key", pl.Source.Key)
	}
}
