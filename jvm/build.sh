#!/usr/bin/env bash
# Builds pagemq's JVM reader of page files (docs/spark.md, "The JVM reader") into $2, compiled
# against the Spark jars of the PySpark that $1 (a Python) imports. Without javac it says so
# and builds nothing: pagemq.spark then reads page files in Python (slower, same rows).
set -euo pipefail
python=$1
jar=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v javac >/dev/null 2>&1 || ! command -v jar >/dev/null 2>&1; then
  echo "note: no javac/jar (a JDK 17+): pagemq's JVM reader of page files is not built;" \
       "Spark batch reads of page files will run in Python" >&2
  exit 0
fi
spark_jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
javac --release 17 -Xlint:all,-path -Werror -cp "$spark_jars/*" -d "$classes" "$here"/src/io/pagemq/spark/*.java
cp -r "$here"/resources/. "$classes"/
mkdir -p "$(dirname "$jar")"
jar --create --file "$jar.tmp" -C "$classes" .
mv "$jar.tmp" "$jar"
echo "built $jar"
