exports.greet = (n) => 'hello, ' + n;
