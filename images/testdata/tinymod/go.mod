module example.test/tinymod

go 1.26.0
