exports.greet = (n) => 'hello (1.0.0), ' + n;
