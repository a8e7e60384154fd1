int vanishing_dependency_function() { return 1; }
