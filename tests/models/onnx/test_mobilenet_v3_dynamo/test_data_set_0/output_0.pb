
BlogitsJ(ýUç:€MX»†a;¦úa:ºÎ†;:Òsº#Æ™:î‚;–üg;en)»