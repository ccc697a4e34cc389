package avro

import (
	_ "embed"
	"strings"
)

// ratingSchemaFile is the Avro schema of a rating.
//
//go:embed rating.avsc
var ratingSchemaFile string

// countAndSumSchemaFile is the Avro schema of a movie aggregate.
//
//go:embed countandsum.avsc
var countAndSumSchemaFile string

var (
	// RatingSchema is the JSON text of io.confluent.demo.Rating
	// {movie_id: long, rating: double}, the value of the ratings topic.
	RatingSchema = strings.TrimSpace(ratingSchemaFile)
	// CountAndSumSchema is the JSON text of io.confluent.demo.CountAndSum
	// {count: long, sum: double}, the value of the changelog topic.
	CountAndSumSchema = strings.TrimSpace(countAndSumSchemaFile)
)

// Rating is one rating of a movie (io.confluent.demo.Rating).
type Rating struct {
	// MovieID is the rated movie (Avro field movie_id).
	MovieID int64
	// Rating is the rating, 0 to 10 by convention; the codec does not
	// check the range (Avro field rating).
	Rating float64
}

// CountAndSum is the aggregate of a movie's ratings
// (io.confluent.demo.CountAndSum).
type CountAndSum struct {
	// Count is the number of ratings (Avro field count).
	Count int64
	// Sum is the sum of the ratings (Avro field sum).
	Sum float64
}

// ValueSubject returns the registry subject of the values of topic under the
// Confluent TopicNameStrategy: "<topic>-value".
func ValueSubject(topic string) string { return topic + "-value" }
